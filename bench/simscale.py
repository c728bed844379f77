"""Issue 22's figures in the AWS simulation, each over several seeds with its spread: the
overload pair (handler starts at twice a partition's write budget against just below it), one
sharded queue's single-enqueue rate before and after S3's split with its cost per million when
it keeps up, and enqueue-to-start p99 at half capacity with the default settings.

One run per figure hid a cliff once (issue 22), so every figure here is the median of
`Plan.aws_sim_seeds` runs, with its minimum and maximum.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from typing import Any

from s3queue.contract.settings import QueueSettings

from bench import aws_sim, simoverload, simshards
from bench.plan import Plan
from bench.progress import Progress
from bench.simaws import AWS, Model
from bench.simworld import settings_from
from bench.tables import Row
from bench.target import Target

BUDGET = 3_500
"""S3's writes a second per partition (AWS-FACTS): the overload pair is offered just below
it and twice it."""


def run(plan: Plan, model: Model, settings: QueueSettings, half: float) -> dict[str, Any]:
    """Every figure over the plan's seeds; `half`: the half-capacity rate of `enqueue`."""
    seeds = list(plan.aws_sim_seeds)
    overload = simoverload.runs(
        [plan.aws_sim_variant_offered, 2 * BUDGET],
        plan.aws_sim_overload_seconds,
        ["s3queue"],
        seeds,
    )
    shards = simshards.runs(
        plan.aws_sim_shards,
        plan.aws_sim_shards_offered,
        plan.aws_sim_shards_seconds,
        plan.aws_sim_shards_warmup,
        seeds,
    )
    shards["steady"] = simshards.steady_runs(
        plan.aws_sim_shards,
        plan.aws_sim_shards_steady_offered,
        plan.aws_sim_shards_seconds,
        plan.aws_sim_shards_warmup,
        seeds,
    )
    p99 = half_capacity(half, plan, model, settings, seeds)
    return {
        "seeds": seeds,
        "overload": overload,
        "shards": shards,
        "half_capacity": {"offered_per_s": round(half, 1), "p99_ms": _spread(p99)},
    }


def half_capacity(
    rate: float, plan: Plan, model: Model, settings: QueueSettings, seeds: list[int]
) -> list[float]:
    """Enqueue-to-start p99 (ms) of single enqueues offered at `rate` (half the queue's
    capacity), one steady run per seed."""
    return [
        aws_sim.steady("single", rate, plan, model, settings, seed=s)["latency_ms"]["p99"]
        for s in seeds
    ]


def main() -> None:
    """p99 at half capacity alone: ``python -m bench.simscale --rate 859 --seeds 1,2,3``."""
    parser = argparse.ArgumentParser(prog="python -m bench.simscale", description=main.__doc__)
    parser.add_argument("--rate", type=float, default=859.0, help="enqueues a second offered")
    parser.add_argument("--seeds", default="1,2,3", help="the world's seeds, one run each")
    parser.add_argument("--settings", default="", help="queue settings, name=value,...")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    p99 = half_capacity(args.rate, Plan(), AWS, settings_from(args.settings), seeds)
    print(json.dumps({"offered_per_s": args.rate, "seeds": seeds, "p99_ms": _spread(p99)}))


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _fig(spread: dict[str, float], fmt: str = ",.0f") -> str:
    return f"{spread['median']:{fmt}} ({spread['min']:{fmt}}-{spread['max']:{fmt}})"


def section(d: dict[str, Any]) -> str:
    """results.md's paragraph: median (min-max) over the seeds."""
    low, high = d["overload"]["rows"][:2]
    shards = d["shards"]
    before, after, steady = shards["before_split"], shards["after_split"], shards["steady"]
    return (
        f"Issue 22, median (min-max) over seeds {d['seeds']}: handler starts at "
        f"{high['offered_per_s']:,.0f} `enqueue`s a second (twice a partition's write budget) "
        f"{_fig(high['handler_starts_per_s'])} a second against {_fig(low['handler_starts_per_s'])}"
        f" at {low['offered_per_s']:,.0f} (ratio {high['starts_vs_first']:.2f}). One queue with "
        f"{shards['shards']} shards ({shards['settings']}), {shards['offered_per_s']:,.0f} "
        f"offered: {_fig(before['handler_starts_per_s'])} started a second before S3's split "
        f"({_fig(before['enqueued_per_s'])} enqueued), {_fig(after['handler_starts_per_s'])} after"
        f" ({_fig(after['enqueued_per_s'])} enqueued); at {steady['offered_per_s']:,.0f} offered"
        f" after the split, {_fig(steady['handler_starts_per_s'])} started a second, "
        f"${_fig(steady['usd_per_million'], '.2f')} per million (every request over every "
        f"message, drained). Enqueue-to-start p99 at half capacity "
        f"({d['half_capacity']['offered_per_s']:,.0f} a second, defaults): "
        f"{_fig(d['half_capacity']['p99_ms'])} ms."
    )


def headline(d: dict[str, Any]) -> list[Row]:
    """Issue 22's targets against the medians."""
    low, high = d["overload"]["rows"][:2]
    steady = d["shards"]["steady"]
    starts, usd = steady["handler_starts_per_s"]["median"], steady["usd_per_million"]["median"]
    p99 = d["half_capacity"]["p99_ms"]["median"]
    return [
        Row(
            "AWS simulation: handler starts at 2x a partition's write budget vs just below",
            f"{high['handler_starts_per_s']['median']:,.0f} vs "
            f"{low['handler_starts_per_s']['median']:,.0f} a second "
            f"({high['starts_vs_first']:.2f})",
            "≥ 0.9",
            high["starts_vs_first"] >= 0.9,
        ),
        Row(
            "AWS simulation: one sharded queue after S3's split, single enqueues",
            f"{_fig(steady['handler_starts_per_s'])} a second at "
            f"${_fig(steady['usd_per_million'], '.2f')} per million "
            f"(before the split: {_fig(d['shards']['before_split']['handler_starts_per_s'])})",
            "≥ 10,000 a second, ≤ $6",
            starts >= 10_000 and usd <= 6,
        ),
        Row(
            "AWS simulation: enqueue-to-start p99 at half capacity, defaults",
            f"{_fig(d['half_capacity']['p99_ms'])} ms",
            "≤ 1,000 ms",
            p99 <= 1_000,
        ),
    ]


def scenario(target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    """`aws_sim.run`, then these figures over the plan's seeds (``out["scale"]``): apart, so
    that aws_sim, which these build on, does not import them."""
    out = aws_sim.run(target, plan, progress)
    model, settings = (
        replace(AWS, cpu_scale=plan.aws_sim_cpu_scale),
        settings_from(plan.aws_sim_settings),
    )
    progress.update(1.0, "overload pair, shards, p99 at half capacity (seeds)")
    out["scale"] = run(plan, model, settings, out["single"]["steady"]["offered_per_s"])
    return out


if __name__ == "__main__":
    main()

"""Only the overload runs of the AWS simulation, as JSON on stdout: producers offered more
single enqueues a second than one S3 partition takes (3,500 writes), with the pacing `Queue`'s
own client does (`s3queue.producing.pacing`) and, to compare, without pacing or with botocore's
adaptive retry mode: ``python -m bench.simoverload --help``.

The figure that matters is handler starts a second at twice the budget against just below it
(issue 22: at least 0.9); the producers' side is what they got enqueued and what failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from typing import Any

from bench import aws_sim, simworld
from bench.plan import DEFAULT
from bench.simaws import AWS
from bench.sims3 import Pacing


def runs(
    offered: list[float], seconds: float, pacings: list[Pacing], seeds: list[int]
) -> dict[str, Any]:
    """Each (producers' pacing, offered rate) once per seed; each row's median, minimum and
    maximum over the seeds, and its median handler starts against the first rate's (same
    pacing). "none": plain clients, one each."""
    model = replace(AWS, cpu_scale=DEFAULT.aws_sim_cpu_scale)
    settings = simworld.settings_from(DEFAULT.aws_sim_settings)
    out: dict[str, Any] = {"seeds": seeds, "rows": []}
    for pacing in pacings:
        rows: list[dict[str, Any]] = []
        for rate in offered:
            plan = replace(DEFAULT, aws_sim_overload_offered=rate, aws_sim_overload_seconds=seconds)
            each = [
                aws_sim.overload(
                    plan,
                    model,
                    settings,
                    adaptive=pacing != "none",
                    seed=s,
                    pacing="botocore" if pacing == "botocore" else "s3queue",
                )
                for s in seeds
            ]
            rows.append(
                {
                    "producers": pacing,
                    "offered_per_s": rate,
                    **{
                        name: _spread([r[name] for r in each])
                        for name in ("handler_starts_per_s", "enqueued_per_s", "enqueue_failures")
                    },
                    "slowdowns_503": _spread(
                        [sum(r["slowdowns_503_by_role"].values()) for r in each]
                    ),
                }
            )
        base = rows[0]["handler_starts_per_s"]["median"] or 1.0
        for row in rows:
            row["starts_vs_first"] = round(row["handler_starts_per_s"]["median"] / base, 2)
        out["rows"] += rows
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simoverload", description=__doc__)
    parser.add_argument("--offered", default="3200,7000", help="enqueues a second, first = base")
    parser.add_argument("--seconds", type=float, default=14.0, help="virtual s offered")
    parser.add_argument("--standard", action="store_true", help="also producers without pacing")
    parser.add_argument(
        "--botocore", action="store_true", help="also producers paced by botocore's adaptive mode"
    )
    parser.add_argument("--seeds", default="1,2,3", help="the world's seeds, one run each")
    args = parser.parse_args(argv)
    pacings: list[Pacing] = ["s3queue"]
    if args.botocore:
        pacings.append("botocore")
    if args.standard:
        pacings.append("none")
    seeds = [int(s) for s in args.seeds.split(",")]
    result = runs([float(r) for r in args.offered.split(",")], args.seconds, pacings, seeds)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

"""``python -m bench.run``: run the benchmarks and write ``bench/results/<date>/``.

    make bench                                  # embedded SeaweedFS, default sizes (~5 min)
    make bench BENCH_ARGS=--quick               # the same scenarios, smaller (~1.5 min)
    python -m bench.run --endpoint-url https://s3.eu-west-1.amazonaws.com --bucket my-bucket
    python -m bench.run --only cost,scale --scale 1000,10000

A scenario that fails is reported (its error in the results) and the others still run; the
exit code is then 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import (
    coldstart,
    cost,
    fairness,
    flow,
    hiding,
    idle,
    latency,
    payload,
    pool,
    report,
    scale,
    simscale,
    throughput,
)
from bench.measure import load
from bench.plan import DEFAULT, QUICK, SMOKE, Plan
from bench.progress import Progress
from bench.target import Target

ROOT = Path(__file__).resolve().parents[1]
Scenario = Callable[[Target, Plan, Progress], dict[str, Any]]
SCENARIOS: dict[str, Scenario] = {
    "throughput": throughput.run,
    "latency": latency.run,
    "cost": cost.run,
    "idle": idle.run,
    "scale": scale.run,
    "coldstart": coldstart.run,
    "pool": pool.run,
    "fairness": fairness.run,
    "payload": payload.run,
    "aws_sim": simscale.scenario,
    "flow": flow.run,
    "hiding": hiding.run,
}
WEIGHTS = {
    "throughput": 50,
    "latency": 45,
    "cost": 25,
    "idle": 75,
    "scale": 120,
    "coldstart": 10,
    "pool": 90,
    "fairness": 40,
    "payload": 20,
    "aws_sim": 60,
    "flow": 25,
    "hiding": 400,
}
"""Rough seconds each scenario takes at default sizes: the progress bar's proportions."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes, about 1.5 minutes")
    size.add_argument("--smoke", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--endpoint-url", help="any S3 endpoint instead of the embedded server")
    parser.add_argument("--bucket", help="an existing bucket there (required with --endpoint-url)")
    parser.add_argument("--out", type=Path, help="output folder (default bench/results/<date>)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--messages", type=int, help="throughput: messages per worker count")
    parser.add_argument("--workers", help="throughput: worker counts, e.g. 1,4,16")
    parser.add_argument("--scale", help="scale: backlog sizes, e.g. 1000,10000,100000")
    parser.add_argument("--payload-bytes", type=int, help="payload: the file's size in bytes")
    parser.add_argument(
        "--hiding", help="hiding: single, packed and process-drain messages, e.g. 8000,100000,8000"
    )
    parser.add_argument("--sim-queues", help="aws_sim: queues per coordinator, e.g. 1,2,4")
    parser.add_argument("--sim-seconds", type=float, help="aws_sim: measured virtual seconds")
    parser.add_argument(
        "--sim-offered", help="aws_sim: msg/s offered per queue, enqueue,enqueue_many (400,4000)"
    )
    parser.add_argument(
        "--sim-settings", help="aws_sim: queue settings for every run, e.g. concurrency=32"
    )
    parser.add_argument(
        "--sim-variants", help="aws_sim: more capacity points, ';'-separated settings"
    )
    parser.add_argument(
        "--sim-cpu-scale", type=float, help="aws_sim: virtual s per vCPU s of the code (1.0)"
    )
    parser.add_argument(
        "--sim-group",
        help="aws_sim group commit: callers;windows s;offered msg/s (64,256;0.02,0.05,0.1;2000)",
    )
    return parser.parse_args(argv)


def choose_plan(args: argparse.Namespace) -> Plan:
    plan = SMOKE if args.smoke else QUICK if args.quick else DEFAULT
    if args.messages:
        plan = replace(plan, messages=args.messages)
    if args.workers:
        plan = replace(plan, workers=_ints(args.workers))
    if args.scale:
        plan = replace(plan, scale_backlogs=_ints(args.scale))
    if args.payload_bytes:
        plan = replace(plan, payload_bytes=args.payload_bytes)
    if args.hiding:
        single, packed, pool = _ints(args.hiding)
        plan = replace(plan, hiding_messages=single, hiding_packed=packed)
        plan = replace(plan, hiding_pool_messages=pool)
    return _sim_plan(plan, args)


def _sim_plan(plan: Plan, args: argparse.Namespace) -> Plan:
    """The aws_sim options on top of `plan`."""
    if args.sim_queues:
        plan = replace(plan, aws_sim_queues=_ints(args.sim_queues))
    if args.sim_seconds:
        plan = replace(plan, aws_sim_seconds=args.sim_seconds)
    if args.sim_offered:
        single, packed = (float(v) for v in args.sim_offered.split(","))
        plan = replace(plan, aws_sim_single_offered=single, aws_sim_packed_offered=packed)
    if args.sim_settings is not None:
        plan = replace(plan, aws_sim_settings=args.sim_settings)
    if args.sim_cpu_scale is not None:
        plan = replace(plan, aws_sim_cpu_scale=args.sim_cpu_scale)
    if args.sim_variants is not None:
        variants = tuple(v.strip() for v in args.sim_variants.split(";") if v.strip())
        plan = replace(plan, aws_sim_variants=variants)
    if args.sim_group:
        callers, windows, offered = args.sim_group.split(";")
        plan = replace(
            plan,
            aws_sim_gc_callers=_ints(callers),
            aws_sim_gc_windows=tuple(float(w) for w in windows.split(",")),
            aws_sim_gc_offered=float(offered),
        )
    return plan


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())


def selected(args: argparse.Namespace) -> list[str]:
    names = [n.strip() for n in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; choose from {list(SCENARIOS)}")
    return names


def meta(argv: list[str], args: argparse.Namespace, plan: Plan, target: Target) -> dict[str, Any]:
    mode = "smoke" if args.smoke else "quick" if args.quick else "default"
    return {
        "date": datetime.date.today().isoformat(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.run", shlex.join(argv)]).strip(),
        "mode": mode,
        "target": target.describe(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, boto3 {metadata.version('boto3')}",
        "commit": _commit(),
        "load_start": load(),
        "plan": plan.to_dict(),
    }


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return done.stdout.strip()


def run_all(target: Target, plan: Plan, names: list[str]) -> dict[str, Any]:
    """Each scenario in turn; a failure is recorded and the next one runs."""
    progress = Progress({name: WEIGHTS[name] for name in names})
    results: dict[str, Any] = {}
    for name in names:
        progress.start(name)
        started = time.monotonic()
        try:
            data = SCENARIOS[name](target, plan, progress)
        except Exception as exc:  # noqa: BLE001 - reported in the results; the others still run
            data = {"error": f"{type(exc).__name__}: {exc}"}
        data["seconds"] = round(time.monotonic() - started, 1)
        results[name] = data
        progress.finish()
    progress.close()
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    plan, names = choose_plan(args), selected(args)
    started = time.monotonic()
    with Target(args.endpoint_url, args.bucket) as target:
        info = meta(argv, args, plan, target)
        scenarios = run_all(target, plan, names)
    info["load_end"] = load()
    info["seconds"] = round(time.monotonic() - started, 1)
    results: dict[str, Any] = {"meta": info, "scenarios": scenarios}
    if "aws_sim" in scenarios:  # issue 13 asks for it at the top level too
        results["aws_sim"] = scenarios["aws_sim"]
    out = args.out or ROOT / "bench" / "results" / info["date"]
    files = report.write(out, results)
    print(report.headline_table(results))
    print("\nwrote " + ", ".join(str(f.relative_to(out)) for f in files) + f" in {out}")
    failed = [name for name, data in scenarios.items() if "error" in data]
    for name in failed:
        print(f"scenario {name} failed: {scenarios[name]['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

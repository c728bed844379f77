"""The headline: each target of issue 6 against what the run measured, met or missed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from s3queue.local.runtime import LOCAL_SERVE

from bench import hidingreport
from bench.tables import Row

Results = dict[str, Any]


def rows(results: Results) -> list[Row]:
    """Every headline row whose scenario ran (without error)."""
    scenarios = results.get("scenarios", {})
    out: list[Row] = []
    for name, build in BUILDERS:
        data = scenarios.get(name)
        if data and "error" not in data:
            out.extend(build(data))
    return out


def _cost(data: Results) -> list[Row]:
    modes = {m["mode"]: m for m in data["modes"]}
    sqs = data["sqs"]
    out = []
    for mode, limit, price in (("enqueue", 3.0, 8.0), ("enqueue_many(100)", 0.2, 1.0)):
        m = modes.get(mode)
        if m is None:
            continue
        per = m["per_message"]
        mix = ", ".join(f"{k} {per[k]:.2f}" for k in ("PUT", "GET", "LIST", "DELETE"))
        out.append(
            Row(
                f"S3 requests per message, `{mode}`",
                f"{per['total']:.3f} ({mix})",
                f"≤ {limit:g}",
                per["total"] <= limit,
            )
        )
        sqs_price = sqs["unbatched"] if mode == "enqueue" else sqs["batched (10 per call)"]
        out.append(
            Row(
                f"S3 cost per million messages, `{mode}`",
                f"${m['usd_per_million']:.2f} (SQS: ${sqs_price:.2f})",
                f"< ${price:g}",
                m["usd_per_million"] < price,
            )
        )
    return out


def _idle(data: Results) -> list[Row]:
    invocation = data["lambda_idle"]
    per_minute = invocation["per_invocation_per_queue"]
    out = [
        Row(
            "Idle S3 requests per minute per queue, coordinator Lambda (1 run a minute)",
            f"{per_minute:g} (LIST {invocation['requests']['LIST']} in "
            f"{invocation['invocations']} runs x {invocation['queues']} queues)",
            "≤ 2",
            per_minute <= 2,
        )
    ]
    windows = data["local"]["windows"]
    if windows:
        first = windows[0]
        out.append(
            Row(
                "Idle S3 requests per minute, local runtime "
                f"(polling every ≤ {LOCAL_SERVE.max_idle_interval:g} s)",
                f"{first['per_minute']:g}",
                "",
                None,
            )
        )
        latencies = [w["first_message_latency_ms"] for w in windows]
        out.append(
            Row(
                "First message after idle, enqueue to handler start (local)",
                " / ".join(f"{ms} ms" for ms in latencies),
                "",
                None,
            )
        )
    return out


def _scale(data: Results) -> list[Row]:
    points = data["points"]
    if not points:
        return []
    ends = [points[0], points[-1]]
    requests = " → ".join(str(p["summary"]["dispatch"]["requests_total"]) for p in ends)
    ms = " → ".join(f"{p['summary']['dispatch']['median_ms']:g}" for p in ends)
    sizes = " → ".join(f"{p['backlog']:,}" for p in ends)
    return [
        Row(
            f"Coordinator dispatching tick, {sizes} pending",
            f"{requests} requests, {ms} ms (same mix kind by kind: {data['flat']})",
            "flat",
            bool(data["flat"]),
        )
    ]


def _throughput(data: Results) -> list[Row]:
    out = []
    for p in data["points"]:
        target = "≥ 0.5 of ceiling" if p["workers"] == 16 else ""
        met = p["fraction_of_ceiling"] >= 0.5 if p["workers"] == 16 else None
        out.append(
            Row(
                f"Throughput, {p['workers']} workers",
                f"{p['messages_per_s']:g} msg/s; {p['s3_ops_per_s']:g} S3 ops/s = "
                f"{p['fraction_of_ceiling']:.2f} of ceiling {p['ceiling_ops_per_s']:g}",
                target,
                met,
            )
        )
    return out


def _latency(data: Results) -> list[Row]:
    out = []
    for name in ("steady", "backlog"):
        d = data[name]
        if d.get("count"):
            out.append(
                Row(
                    f"Latency, {name} (enqueue to handler start, p50/p95/p99)",
                    f"{d['p50']:g} / {d['p95']:g} / {d['p99']:g} ms",
                    "",
                    None,
                )
            )
    return out


def _coldstart(data: Results) -> list[Row]:
    imports = data["imports"]
    text = ", ".join(f"{n} {v['deployed']['median_ms']:g} ms" for n, v in imports.items())
    layer = data["layer"]
    return [
        Row("Cold start: import of the entry points (as deployed)", text, "", None),
        Row(
            "Layer size (zip of layers/s3queue/python)",
            f"{layer['zip_bytes'] / 1024:.0f} KiB ({layer['files']} files)",
            "",
            None,
        ),
    ]


def _aws_sim(data: Results) -> list[Row]:
    from bench import simreport  # noqa: PLC0415 - it loads matplotlib, which a headline needs not

    return simreport.headline(data)


def _hiding(data: Results) -> list[Row]:
    return hidingreport.headline(data)


BUILDERS: list[tuple[str, Callable[[Results], list[Row]]]] = [
    ("cost", _cost),
    ("idle", _idle),
    ("scale", _scale),
    ("throughput", _throughput),
    ("latency", _latency),
    ("coldstart", _coldstart),
    ("aws_sim", _aws_sim),
    ("hiding", _hiding),
]

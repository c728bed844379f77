"""The aws_sim scenario in results.md, the headline and a figure."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

from matplotlib import pyplot as plt  # the backend is chosen first
from matplotlib.figure import Figure

from bench import simscale
from bench.tables import Row, table

Results = dict[str, Any]
MODES = (("single", "`enqueue`"), ("packed", "`enqueue_many(100)`"))
TARGETS = {"single": 2_000, "packed": 50_000}
"""Issue 13's targets for one queue (the dispatch work, item 2)."""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    return table(headers, rows)


def section(data: Results) -> list[str]:
    """The tables of results.md."""
    sqs = data["sqs_usd_per_million"]
    rows: list[list[Any]] = [["messages/s, one queue"], ["enqueue to handler start p50 / p99 ms"]]
    rows += [["S3 requests per message (PUT, GET, LIST, DELETE)"], ["$ per million messages"]]
    for mode, _ in MODES:
        m, steady = data[mode], data[mode]["steady"]
        per, usd = steady["per_message"], steady["usd_per_million"]
        rows[0].append(f"{m['msgs_per_s']:,.0f}")
        rows[1].append(f"{m['latency_ms']['p50']:,.0f} / {m['latency_ms']['p99']:,.0f}")
        mix = ", ".join(f"{per[k]:.3g}" for k in ("PUT", "GET", "LIST", "DELETE"))
        rows[2].append(f"{per['total']:.3g} ({mix})")
        rows[3].append(
            f"${usd['total']:.2f} (S3 {usd['s3_requests']:.2f}, Lambda "
            f"{usd['lambda_requests'] + usd['lambda_duration']:.2f})"
        )
    rows[3].append(f"${sqs['unbatched']:.2f} / ${sqs['batched (10 per call)']:.2f} batched")
    for row in rows[:3]:
        row.append("")
    main = _table(["", "`enqueue`", "`enqueue_many(100)`", "SQS standard"], rows)
    parts = [main, _curve(data), _idle(data), _where(data["single"]["curve"][0])]
    if data.get("variants"):
        parts.append(_variants(data))
    if data.get("overload"):
        parts.append(_overload(data["overload"]))
    if data.get("group_commit"):
        parts.append(_group_commit(data["group_commit"]))
    if data.get("scale"):
        parts.append(simscale.section(data["scale"]))
    return parts


def _group_commit(d: Results) -> str:
    rows = []
    for r in d["runs"]:
        usd, call, start = r["usd_per_million"], r["enqueue_call_ms"], r["latency_ms"]
        rows.append(
            [
                r["callers"],
                f"{r['window_s'] * 1000:g}",
                f"{r['durable_per_s']:,.0f}",
                f"{r['handler_starts_per_s']:,.0f}",
                r["messages_per_object"],
                f"{call.get('p50', 0):,.0f} / {call.get('p99', 0):,.0f}",
                f"{start.get('p50', 0):,.0f} / {start.get('p99', 0):,.0f}",
                r["per_message"]["total"],
                f"${usd['total']:.3f}",
            ]
        )
    headers = [
        "callers",
        "window ms",
        "durable msg/s",
        "handler starts/s",
        "msgs per object",
        "call p50 / p99 ms",
        "enqueue to start p50 / p99 ms",
        "S3 requests per message",
        "$ per million",
    ]
    return (
        f"Group commit: single `enqueue` calls offered at {d['offered_per_s']:,.0f} a second "
        "through one `Queue.batching()` (target $0.10 per million; SQS batched "
        f"${d['sqs_batched_usd_per_million']:.2f}):\n\n" + _table(headers, rows)
    )


def _overload(d: Results) -> str:
    by_role = ", ".join(f"{role} {n:,}" for role, n in d["slowdowns_503_by_role"].items())
    return (
        f"Above S3's write rate per prefix: {d['offered_per_s']:,.0f} `enqueue`s a second "
        f"offered for {d['seconds']:g} s on one queue: {d['enqueued_per_s']:,.0f} enqueued a "
        f"second, {d['enqueue_failures']:,} raised `StorageError` (S3Storage's retries spent); "
        f"503 SlowDown answers: {by_role or 'none'}; handler starts "
        f"{d['handler_starts_per_s']:g} a second from {d['handler_starts_from_s']:g} s on "
        "(the producers' writes crowd out the coordinator's and workers' on the same prefix)."
    )


def _variants(data: Results) -> str:
    rows = []
    for point in [data["single"]["curve"][0], data["packed"]["curve"][0], *data["variants"]]:
        where = point["where_time_goes"]
        busy = 1 - where["coordinator_share"].get("sleep", 0.0)
        peak = max(f["peak_concurrency"] for f in where["worker_functions"])
        bound = " (offered-bound)" if point["offered_bound"] else ""
        rows.append(
            [
                dict(MODES)[point["mode"]] + ", " + (point.get("settings") or "defaults") + bound,
                point["msgs_per_s_per_queue"],
                f"{busy:.0%}",
                where["dispatched_per_tick"],
                where["ticket_dispatch_to_claim_ms"],
                where["ticket_claim_to_applied_ms"],
                peak,
            ]
        )
    headers = [
        "one queue: mode, settings",
        "msg/s",
        "coordinator busy",
        "messages per tick",
        "dispatch to claim ms",
        "claim to applied ms",
        "peak workers",
    ]
    return "Other settings (as deployed: in flight at most `concurrency`):\n\n" + _table(
        headers, rows
    )


def _curve(data: Results) -> str:
    rows = []
    for single, packed in zip(data["single"]["curve"], data["packed"]["curve"], strict=True):
        rows.append(
            [
                single["queues"],
                single["msgs_per_s_total"],
                _bounded(single),
                packed["msgs_per_s_total"],
                _bounded(packed),
            ]
        )
    headers = ["queues, one coordinator", "`enqueue` msg/s", "per queue"]
    return "Capacity against queues served by one coordinator function:\n\n" + _table(
        [*headers, "`enqueue_many(100)` msg/s", "per queue"], rows
    )


def _bounded(point: Results) -> str:
    """A per-queue rate, flagged when it is the offered rate (raise ``--sim-offered``)."""
    flag = " (offered-bound)" if point["offered_bound"] else ""
    return f"{point['msgs_per_s_per_queue']:,.1f}{flag}"


def _idle(data: Results) -> str:
    idle = data["after_idle"]
    rows = []
    for mode in ("scheduled", "low_latency"):
        d = idle[mode]
        rows.append(
            [
                mode.replace("_", " "),
                d["messages"],
                d["latency_ms"]["p50"],
                d["latency_ms"]["p99"],
                d["coordinator_invocations"],
                f"${d['usd_per_message'] * 1e6:.2f}",
            ]
        )
    headers = ["after idle", "messages", "p50 ms", "p99 ms", "coordinator runs", "$ per million"]
    extra = idle["low_latency_extra_usd_per_message"] * 1e6
    parts = ", ".join(
        f"{k} {v:+.2f}" for k, v in idle["low_latency_extra_usd_per_million_by_part"].items()
    )
    busy, quiet = idle["busy_low_latency"], data["single"]["steady"]
    coordinator = busy["coordinator"]
    return (
        _table(headers, rows)
        + f"\n\nLow-latency mode, extra cost after idle: ${extra:.2f} per million messages "
        f"({parts}; whole runs, idle probes included, divided by the messages). Busy, at the "
        "steady "
        f"`enqueue` rate ({busy['offered_per_s']:g} msg/s): p50 {busy['latency_ms']['p50']:g} ms "
        f"(scheduled {quiet['latency_ms']['p50']:g} ms), "
        f"${busy['usd_per_million']['total']:.2f} per million (scheduled "
        f"${quiet['usd_per_million']['total']:.2f}); "
        f"{busy['events']['s3_object_created']:,} S3 events, "
        f"{coordinator['throttled_deliveries']:,} throttled coordinator starts, "
        f"{coordinator['dropped_events']:,} dropped after a minute."
    )


def _where(point: Results) -> str:
    where = point["where_time_goes"]
    shares = ", ".join(f"{k} {v:.0%}" for k, v in where["coordinator_share"].items())
    worker = ", ".join(f"{k} {v:g}" for k, v in where["worker_ms_per_ticket"].items())
    return (
        f"Where the time goes (`enqueue`, one queue, at capacity): coordinator time {shares}; "
        f"{where['coordinator_ticks']} ticks, {where['dispatched_per_tick']:g} messages "
        f"dispatched per tick, {where['ticks_at_in_flight_limit']:.0%} of ticks ended at the "
        f"in-flight limit; ticket dispatch to claim p50 {where['ticket_dispatch_to_claim_ms']:g}"
        f" ms, claim to applied {where['ticket_claim_to_applied_ms']:g} ms; in-flight slots "
        f"holding a ticket {where['in_flight_slot_use']:.0%} of the time; worker ms per ticket: "
        f"{worker}."
    )


def headline(data: Results) -> list[Row]:
    """Issue 13's targets against the simulated figures: with the defaults, and the best of
    the variants (settings named)."""
    out = []
    for mode, label in MODES:
        m = data[mode]
        best = max(
            (v for v in data.get("variants", []) if v["mode"] == mode),
            key=lambda v: v["msgs_per_s_per_queue"],
            default=None,
        )
        top = (
            m["msgs_per_s"] if best is None else max(m["msgs_per_s"], best["msgs_per_s_per_queue"])
        )
        tuned = (
            f"; {best['msgs_per_s_per_queue']:,.0f} with {best['settings']}"
            if best is not None
            else ""
        )
        out.append(
            Row(
                f"AWS simulation: messages/s, one queue, {label}",
                f"{m['msgs_per_s']:,.0f} with the defaults (p50 {m['latency_ms']['p50']:,.0f} ms "
                f"at half that rate; ${m['usd_per_million']['total']:.2f} per million){tuned}",
                f"≥ {TARGETS[mode]:,}",
                top >= TARGETS[mode],
            )
        )
    single = data["single"]["usd_per_million"]["total"]
    out.append(
        Row(
            "AWS simulation: $ per million `enqueue`d messages, defaults, half capacity",
            f"${single:.2f}",
            "≤ $6",
            single <= 6,
        )
    )
    low = data["after_idle"]["low_latency"]["latency_ms"]["p50"]
    scheduled = data["after_idle"]["scheduled"]["latency_ms"]["p50"]
    out.append(
        Row(
            "AWS simulation: first message after idle, p50 (low-latency / scheduled)",
            f"{low:,.0f} ms / {scheduled:,.0f} ms",
            "≤ 1,000 ms (low-latency)",
            low <= 1_000,
        )
    )
    if data.get("scale"):
        out += simscale.headline(data["scale"])
    return out


def figure(data: Results) -> Figure:
    """Capacity against queues per coordinator, both modes."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (mode, label) in zip(axes, MODES, strict=True):
        curve = data[mode]["curve"]
        queues = [p["queues"] for p in curve]
        ax.plot(queues, [p["msgs_per_s_total"] for p in curve], marker="o", label="all queues")
        ax.plot(queues, [p["msgs_per_s_per_queue"] for p in curve], marker="s", label="per queue")
        ax.set_title(f"{label}: messages/s (simulated AWS)", fontsize=10)
        ax.set_xlabel("queues served by one coordinator function")
        ax.set_xticks(queues)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

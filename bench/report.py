"""Writing a run: ``results.json`` (everything), ``results.md`` (tables) and the PNG plots."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import headline, hidingreport, plots, simreport
from bench.tables import table

Results = dict[str, Any]


def write(out: Path, results: Results) -> list[Path]:
    """Every output file of a run, written into `out`; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json"]
    written[0].write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    images = plots.write_all(out, results)
    md = out / "results.md"
    md.write_text(markdown(results, [p.name for p in images]))
    return [*written, md, *images]


def headline_table(results: Results) -> str:
    rows = [(r.what, r.measured, r.target, r.verdict) for r in headline.rows(results)]
    return table(["", "measured", "target", ""], rows)


def markdown(results: Results, images: list[str]) -> str:
    meta = results["meta"]
    parts = [
        f"# S3Queue benchmark, {meta['date']}",
        f"`{meta['command']}` against {meta['target']}, on {meta['machine']}. "
        f"Load average (1/5/15 min) {meta['load_start']} at start, {meta['load_end']} at end; "
        f"{meta['seconds']:.0f} s in all.",
        "## Headline",
        headline_table(results),
    ]
    for name, section in SECTIONS:
        data = results["scenarios"].get(name)
        if data is None:
            continue
        parts.append(f"## {TITLES.get(name, name.capitalize())}")
        if "error" in data:
            parts.append(f"Failed: `{data['error']}`")
            continue
        parts.append("Parameters: " + _params(data.get("params", {})))
        parts.extend(section(data))
        parts.extend(f"![{name}]({image})" for image in images if image.startswith(name))
    return "\n\n".join(parts) + "\n"


def _params(params: dict[str, Any]) -> str:
    return "; ".join(f"{k} = {v}" for k, v in params.items())


def _throughput(data: Results) -> list[str]:
    rows = [
        (
            p["workers"],
            p["ceiling_ops_per_s"],
            p["s3_ops_per_s"],
            p["fraction_of_ceiling"],
            p["messages_per_s"],
            p.get("worker_utilisation", ""),
            p.get("dispatching_ticks", ""),
            p["per_message"]["total"],
            p["enqueue_per_s"],
            str(p["load"]["after"][0]),
        )
        for p in data["points"]
    ]
    headers = [
        "workers",
        "ceiling S3 ops/s",
        "runtime S3 ops/s",
        "fraction",
        "messages/s",
        "worker utilisation",
        "dispatching ticks",
        "requests/message (runtime)",
        "enqueue msg/s",
        "load",
    ]
    note = (
        "Requests per message here are the runtime's (coordinator, workers, polling); the "
        "enqueue PUT (1 per message) is not included. The ceiling uses W threads; the "
        "runtime runs W workers plus the coordinator loop, so it can exceed 1 at small W. "
        "Worker utilisation: time workers spent inside tickets over W x the run; low means they "
        "waited for the coordinator to publish tickets."
    )
    return [table(headers, rows), note]


def _latency(data: Results) -> list[str]:
    rows = [
        (
            name,
            d.get("count", 0),
            d.get("p50", 0.0),
            d.get("p95", 0.0),
            d.get("p99", 0.0),
            d.get("max", 0.0),
        )
        for name, d in (("steady", data["steady"]), ("backlog", data["backlog"]))
    ]
    backlog = data["backlog"]
    note = (
        f"Backlog: {data['params']['backlog']} messages enqueued in "
        f"{backlog.get('enqueue_seconds')} s; first enqueue to last handler start "
        f"{backlog.get('span_seconds')} s."
    )
    return [table(["case", "messages", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows), note]


def _cost(data: Results) -> list[str]:
    rows = []
    for m in data["modes"]:
        per, role = m["per_message"], m["per_message_by_role"]
        rows.append(
            (
                m["mode"],
                m["messages"],
                per["PUT"],
                per["GET"],
                per["LIST"],
                per["DELETE"],
                per["total"],
                role["enqueue"],
                role["coordinator"],
                role["worker"],
                f"${m['usd_per_million']:.2f}",
            )
        )
    rows += [
        (f"SQS standard, {name}", "", "", "", "", "", "", "", "", "", f"${usd:.2f}")
        for name, usd in data["sqs"].items()
    ]
    headers = [
        "mode",
        "messages",
        "PUT",
        "GET",
        "LIST",
        "DELETE",
        "total/msg",
        "enqueue",
        "coordinator",
        "worker",
        "$ per million",
    ]
    return [table(headers, rows)]


def _idle(data: Results) -> list[str]:
    rows = [
        (
            w["seconds"],
            w["requests"]["LIST"],
            sum(w["requests"].values()),
            w["per_minute"],
            w["first_message_latency_ms"],
        )
        for w in data["local"]["windows"]
    ]
    local = table(
        ["idle window s", "LIST", "all requests", "per minute", "next message latency ms"], rows
    )
    inv = data["lambda_idle"]
    busy = data["lambda_busy_minute"]
    coordinator = busy["coordinator_requests"]
    text = (
        f"Coordinator Lambda, idle: {inv['invocations']} invocations of the real handler "
        f"over {inv['queues']} queues sent {inv['requests']} — "
        f"**{inv['per_invocation_per_queue']:g} request per queue per run** (handler "
        f"{inv['handler_ms']} ms; the first builds the container). A run that finds one "
        f"message (serve on a FakeClock, default ServeSettings): coordinator "
        f"{coordinator} = {sum(coordinator.values())} requests over "
        f"{busy['run_seconds_on_fake_clock']} s ({busy['serve']['ticks']} ticks), worker "
        f"{busy['worker_requests']}."
    )
    return [local, text]


def _scale(data: Results) -> list[str]:
    rows = []
    for p in data["points"]:
        s = p["summary"]
        rows.append(
            (
                p["backlog"],
                str(s["dispatch"]["requests"]),
                s["dispatch"]["median_ms"],
                str(s["saturated"]["requests"]),
                s["saturated"]["median_ms"],
                str(p["ticks"][0]["requests"]),
                p["ticks"][0]["ms"],
            )
        )
    headers = ["pending", "dispatching tick", "ms", "saturated tick", "ms", "takeover tick", "ms"]
    writes = table(
        ["objects written", "method", "seconds", "objects/s"],
        [(w["objects"], w["method"], w["seconds"], w["per_s"]) for w in data["backlog_writes"]],
    )
    return [
        table(headers, rows),
        f"Same request mix at every size: **{data['flat']}**.",
        "Writing the backlog:",
        writes,
    ]


def _coldstart(data: Results) -> list[str]:
    rows = []
    for name, variants in data["imports"].items():
        for variant, r in variants.items():
            top = ", ".join(f"{t['module']} {t['cumulative_ms']:g}" for t in r["top"][:4])
            rows.append((name, variant, r["median_ms"], top))
    layer = data["layer"]
    size = (
        f"Layer: {layer['files']} files, {layer['bytes']:,} bytes, "
        f"{layer['zip_bytes']:,} bytes zipped."
    )
    return [table(["function", "variant", "import ms (median)", "biggest imports, ms"], rows), size]


def _pool(data: Results) -> list[str]:
    rows = [
        (
            p["processes"],
            p["threads_each"],
            p["messages"],
            p["seconds"],
            p["messages_per_s"],
            p["ratio_to_one"],
        )
        for p in data["scaling"]
    ]
    headers = [
        "processes",
        "threads each",
        "messages",
        "seconds",
        "messages/s",
        "ratio to one process",
    ]
    f, idle = data["failover"], data["idle_worker"]
    notes = (
        f"Leader SIGKILL to the next ticket published: p50 {f['p50']} s, max {f['max']} s over "
        f"{f['rounds']} kills ({', '.join(map(str, f['seconds']))} s). An idle worker process: "
        f"{idle['requests_per_minute']} S3 requests a minute per queue ({idle['requests']})."
    )
    return [table(headers, rows), notes]


def _fairness(data: Results) -> list[str]:
    rows = [
        (case, data[key]["count"], data[key]["p50"], data[key]["p99"], data[key]["max"])
        for case, key in (("alone", "alone"), ("beside the backlog", "beside_backlog"))
    ]
    headers = ["small partition", "messages", "p50 ms", "p99 ms", "max ms"]
    p = data["params"]
    notes = (
        f"p99 beside a {p['backlog']:,}-message backlog in another partition / p99 alone: "
        f"**{data['p99_ratio']}** (target <= 1.5). When the last small message started, "
        f"{data['beside_backlog']['backlog_left_at_last_small']:,} backlog messages had not."
    )
    return [table(headers, rows), notes]


def _payload(data: Results) -> list[str]:
    rows = [
        (
            side,
            data[side]["seconds"],
            data[side]["mib_per_s"],
            data[side]["rss_before_mib"],
            data[side]["rss_peak_mib"],
            data[side]["rss_growth_mib"],
        )
        for side in ("producer", "worker")
    ]
    headers = ["process", "seconds", "MiB/s", "RSS before, MiB", "peak RSS, MiB", "growth, MiB"]
    size = data["params"]["payload_bytes"] / 1024**2
    note = (
        f"One {size:,.0f} MiB file: `enqueue_file(path)` in one process, the local runtime "
        "reading it to its end through `message.open()` in another."
    )
    return [table(headers, rows), note]


def _flow(data: Results) -> list[str]:
    rows = [
        (
            m["mode"],
            m["messages"],
            m["per_message"]["total"],
            m["per_message_by_role"]["enqueue"],
            m["per_message_by_role"]["coordinator"],
            m["per_message_by_role"]["worker"],
            f"${m['usd_per_million']:.2f}",
        )
        for m in data["modes"]
    ]
    headers = ["mode", "messages", "total/msg", "enqueue", "coordinator", "worker", "$ per million"]
    note = (
        "Requests per message with and without flow control (bench/flow.py): a queue that never "
        "pauses or uses priorities or limits must cost what `plain` costs; `rate_limit 100` "
        "and the partition caps (partition_rate_limit 25, partition_concurrency 20 over 4 "
        "partitions) against their unlimited twins."
    )
    idle = [m["idle_step"] for m in data["modes"] if "idle_step" in m]
    if idle:
        note += (
            f" A schedule's slot: enqueued by the coordinator (its column), dispatched, run; a "
            f"coordinator step with no slot due costs {idle[0]['requests_per_call']:g} requests "
            f"({idle[0]['calls']} steps)."
        )
    return [table(headers, rows), note]


SECTIONS: list[tuple[str, Callable[[Results], list[str]]]] = [
    ("throughput", _throughput),
    ("latency", _latency),
    ("cost", _cost),
    ("idle", _idle),
    ("scale", _scale),
    ("coldstart", _coldstart),
    ("pool", _pool),
    ("fairness", _fairness),
    ("payload", _payload),
    ("aws_sim", simreport.section),
    ("flow", _flow),
    ("hiding", hidingreport.section),
]
TITLES = {
    "aws_sim": "AWS simulation (virtual time; see docs/performance.md)",
    "hiding": "Under AWS-like round trips (bench/delay.py's proxy)",
}

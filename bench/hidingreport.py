"""The `hiding` scenario in ``results.md`` and in the headline (issue 22, items 4 and 5)."""

from __future__ import annotations

from typing import Any

from bench.cpuuse import describe
from bench.tables import Row, table

Results = dict[str, Any]
RATIO_TARGET = 0.8
"""Share of its no-delay drain rate the runtime keeps under AWS-like round trips."""
PROCESSES_TARGET = 2.0
"""Three processes against one, under AWS-like round trips."""


def _range(spread: dict[str, float]) -> str:
    return f"{spread['median']:g} ({spread['min']:g} to {spread['max']:g})"


CPU_HEADER = "CPU, cores: runtime, proxy, S3; machine idle"
CPU_NOTE = (
    "CPU: each process's CPU over the run as a share of one core (the runtime: the drain's "
    "process, or the `s3queue` processes together), and the machine's idle share of all its "
    "cores (/proc/stat); **CPU-bound** marks a run with under 15 % idle, whose rate the "
    "machine's cores limited, not S3's round trips."
)


def _cpu(run: Results) -> str:
    return describe(run["cpu"]) if run.get("cpu") else ""


def section(data: Results) -> list[str]:

    rows = []
    for kind, pairs in data["drains"].items():
        for run in pairs["runs"]:
            per = run["per_message"]
            rows.append(
                (
                    kind,
                    run["delays"],
                    run["messages"],
                    run["seconds"],
                    run["messages_per_s"],
                    run.get("steady_messages_per_s"),
                    per["total"],
                    f"{per['GET']:g} / {per['LIST']:g}",
                    run["cpu_ms_per_message"],
                    run["cpu_ms_per_call"],
                    _cpu(run),
                )
            )
    headers = [
        "messages",
        "delays",
        "count",
        "seconds",
        "messages/s (start to end)",
        "steady messages/s",
        "requests/msg",
        "GET / LIST per msg",
        "CPU ms/msg",
        "CPU ms/call",
        CPU_HEADER,
    ]
    p = data["params"]
    ratios = "; ".join(
        f"{kind} **{_range(pairs['ratio'])}** start to end, "
        f"**{_range(pairs.get('steady_ratio') or pairs['ratio'])}** steady"
        for kind, pairs in data["drains"].items()
    )
    notes = (
        f"{p['workers']} workers, delays {p['delays']} against {p['baseline']}; "
        f"rate with delays / rate without, median (min to max) of {p['rounds']} side-by-side "
        f"pairs: {ratios} (target ≥ {RATIO_TARGET:g}). Steady: from the 10th to the 90th "
        f"percentile of handler finishes (`bench.drainrate`). {CPU_NOTE}"
    )
    proc = data["processes"]
    prows = _process_rows(proc)
    pheaders = [
        "processes (1 dev + n-1 worker)",
        "threads each",
        "messages",
        "seconds",
        "messages/s (start to exit)",
        "steady messages/s",
        "first handler after (s, each)",
        "requests/msg",
        "CPU ms/msg (children)",
        CPU_HEADER,
        "exit codes",
    ]
    pnote = (
        f"Under the same delays, 3 processes / 1: **{_range(proc['ratio_three_to_one'])}** "
        f"from the processes' start to the last exit, "
        f"**{_range(proc['steady_ratio_three_to_one'])}** steady (the middle of the drain) "
        f"(target ≥ {PROCESSES_TARGET:g}); requests per message "
        f"{_range(proc['requests_per_message']['1'])} with one, "
        f"{_range(proc['requests_per_message']['3'])} with three (the `--drain` checks included)."
    )
    out = [table(headers, rows), notes, table(pheaders, prows), pnote]
    io = data.get("processes_io")
    if io is not None:
        out += [
            table(pheaders, _process_rows(io)),
            f"With a handler that waits {io['handler_ms']} ms on I/O (no CPU), the same "
            f"comparison: 3 processes / 1 **{_range(io['ratio_three_to_one'])}** from the start "
            f"to the last exit, **{_range(io['steady_ratio_three_to_one'])}** steady; requests "
            f"per message {_range(io['requests_per_message']['1'])} with one, "
            f"{_range(io['requests_per_message']['3'])} with three.",
        ]
    return out


def _process_rows(proc: Results) -> list[tuple[Any, ...]]:
    """One row per process drain."""
    return [
        (
            r["processes"],
            r["threads_each"],
            r["messages"],
            r["seconds"],
            r["messages_per_s"],
            r.get("steady_messages_per_s"),
            r.get("first_handler_s"),
            r["per_message"]["total"],
            r["cpu_ms_per_message"],
            _cpu(r),
            r["exit_codes"],
        )
        for r in proc["runs"]
    ]


def headline(data: Results) -> list[Row]:
    if "drains" not in data:
        return []
    out = []
    for kind, pairs in data["drains"].items():
        for label, key in (("start to end", "ratio"), ("steady", "steady_ratio")):
            ratio = pairs.get(key)
            if ratio is None:
                continue
            out.append(
                Row(
                    f"Drain rate kept under AWS-like latency, 16 workers, {kind}, {label} "
                    "(min to max)",
                    _range(ratio),
                    f"≥ {RATIO_TARGET:g}",
                    ratio["min"] >= RATIO_TARGET,
                )
            )
        cpu = pairs["cpu_ms_per_message"]["none"]
        out.append(Row(f"Runtime CPU ms per message, {kind}", _range(cpu), "", None))
    procs = data["processes"]
    for label, key in (
        ("start to end", "ratio_three_to_one"),
        ("steady", "steady_ratio_three_to_one"),
    ):
        three = procs.get(key)
        if three is None:
            continue
        out.append(
            Row(
                f"1 dev + 2 workers / 1 dev under AWS-like latency, {label} (min to max)",
                _range(three),
                f"≥ {PROCESSES_TARGET:g}",
                three["min"] >= PROCESSES_TARGET,
            )
        )
    io = data.get("processes_io", {}).get("steady_ratio_three_to_one")
    if io is not None:
        out.append(
            Row(
                "1 dev + 2 workers / 1 dev under AWS-like latency, a handler waiting "
                f"{data['processes_io']['handler_ms']} ms (CPU not the limit), steady (min to max)",
                _range(io),
                f"≥ {PROCESSES_TARGET:g}",
                io["min"] >= PROCESSES_TARGET,
            )
        )
    return out

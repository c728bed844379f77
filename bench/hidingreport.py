"""The `hiding` scenario in ``results.md`` and in the headline (issue 22, items 4 and 5)."""

from __future__ import annotations

from typing import Any

from bench.tables import Row, table

Results = dict[str, Any]
RATIO_TARGET = 0.8
"""Share of its no-delay drain rate the runtime keeps under AWS-like round trips."""
PROCESSES_TARGET = 2.0
"""Three processes against one, under AWS-like round trips."""


def _range(spread: dict[str, float]) -> str:
    return f"{spread['median']:g} ({spread['min']:g} to {spread['max']:g})"


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
                    per["total"],
                    f"{per['GET']:g} / {per['LIST']:g}",
                    run["cpu_ms_per_message"],
                    run["cpu_ms_per_call"],
                )
            )
    headers = [
        "messages",
        "delays",
        "count",
        "seconds",
        "messages/s",
        "requests/msg",
        "GET / LIST per msg",
        "CPU ms/msg",
        "CPU ms/call",
    ]
    p = data["params"]
    ratios = ", ".join(
        f"{kind} **{_range(pairs['ratio'])}**" for kind, pairs in data["drains"].items()
    )
    notes = (
        f"{p['workers']} workers, delays {p['delays']} against {p['baseline']}; "
        f"rate with delays / rate without, median (min to max) of {p['rounds']} side-by-side "
        f"pairs: {ratios} (target ≥ {RATIO_TARGET:g})."
    )
    proc = data["processes"]
    prows = [
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
            r["exit_codes"],
        )
        for r in proc["runs"]
    ]
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
        "exit codes",
    ]
    pnote = (
        f"Under the same delays, 3 processes / 1: **{_range(proc['ratio_three_to_one'])}** "
        f"from the processes' start to the last exit, "
        f"**{_range(proc['steady_ratio_three_to_one'])}** steady (first handler start to last "
        f"finish) (target ≥ {PROCESSES_TARGET:g}); requests per message "
        f"{_range(proc['requests_per_message']['1'])} with one, "
        f"{_range(proc['requests_per_message']['3'])} with three (the `--drain` checks included)."
    )
    return [table(headers, rows), notes, table(pheaders, prows), pnote]


def headline(data: Results) -> list[Row]:
    if "drains" not in data:
        return []
    out = []
    for kind, pairs in data["drains"].items():
        ratio = pairs["ratio"]
        out.append(
            Row(
                f"Drain rate kept under AWS-like latency, 16 workers, {kind} (min to max)",
                _range(ratio),
                f"≥ {RATIO_TARGET:g}",
                ratio["min"] >= RATIO_TARGET,
            )
        )
        cpu = pairs["cpu_ms_per_message"]["none"]
        out.append(Row(f"Runtime CPU ms per message, {kind}", _range(cpu), "", None))
    procs = data["processes"]
    for label, key in (
        ("start to exit", "ratio_three_to_one"),
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
    return out

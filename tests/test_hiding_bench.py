"""The hiding scenario's process drains: the steady rate beside the wall rate (bench/hiding.py)."""

from __future__ import annotations

from bench.hiding import _steady


def test_the_steady_rate_runs_from_the_first_handler_start_to_the_last_finish() -> None:
    times = [
        {"process_start_ms": 0, "first_start_ms": 2_000, "last_finish_ms": 9_000, "handled": 700},
        {
            "process_start_ms": 100,
            "first_start_ms": 4_100,
            "last_finish_ms": 12_000,
            "handled": 300,
        },
        {"process_start_ms": 200, "first_start_ms": None, "last_finish_ms": None, "handled": 0},
    ]
    steady = _steady(times, 1_000)
    assert steady["steady_seconds"] == 10.0  # 2 s to 12 s, whichever process
    assert steady["steady_messages_per_s"] == 100.0
    assert steady["first_handler_s"] == [2.0, 4.0, None]  # each from its own start
    assert steady["handled"] == [700, 300, 0]


def test_no_handler_noted_gives_no_steady_rate() -> None:
    assert _steady([{}], 10)["steady_messages_per_s"] is None

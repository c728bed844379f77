"""The hiding scenario's measurements: steady rates (bench/drainrate.py) and where the CPU went
(bench/cpuuse.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench.cpuuse import BOUND_IDLE, CpuWatch, describe, machine_ticks, process_seconds
from bench.drainrate import processes, steady_rate


def test_the_steady_rate_leaves_out_the_first_and_last_tenth_of_finishes() -> None:
    # 100 finishes: a slow start (10 in the first 5 s), then one every 10 ms, then a 5 s tail
    start = [i * 500 for i in range(10)]
    middle = [5_000 + i * 10 for i in range(80)]
    tail = [5_800 + 500 * i for i in range(1, 11)]
    rate = steady_rate(tail + middle + start)  # any order
    # 10th to 90th percentile: finishes 10 to 89, 79 gaps of 10 ms
    assert rate == {"steady_seconds": 0.79, "steady_messages_per_s": 100.0}


def test_too_few_finishes_give_no_steady_rate() -> None:
    assert steady_rate(range(9))["steady_messages_per_s"] is None
    assert steady_rate([5] * 20)["steady_messages_per_s"] is None


def test_processes_merge_their_finishes_and_say_when_each_began() -> None:
    times = [
        {"process_start_ms": 0, "first_start_ms": 2_000, "finishes_ms": list(range(0, 100, 2))},
        {"process_start_ms": 100, "first_start_ms": 4_100, "finishes_ms": list(range(1, 100, 2))},
        {"process_start_ms": 200, "first_start_ms": None, "finishes_ms": []},
    ]
    for t in times:
        t["handled"] = len(t["finishes_ms"])
    steady = processes(times)
    # one finish a millisecond in all: 80 of them over 80 ms between the 10th and 90th
    assert steady["steady_messages_per_s"] == 1000.0
    assert steady["first_handler_s"] == [2.0, 4.0, None]  # each from its own start
    assert steady["handled"] == [50, 50, 0]


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")
def test_a_busy_process_shows_as_about_one_core_and_an_idle_one_as_none() -> None:
    # GIVEN this process spinning, and a source that never moves
    watch = CpuWatch({"me": process_seconds(os.getpid()), "still": lambda: 1.0}).start()
    began, cpu = time.monotonic(), time.process_time()
    deadline = began + 0.5
    while time.monotonic() < deadline:
        pass
    # WHEN the watch stops
    use = watch.stop()
    share = (time.process_time() - cpu) / (time.monotonic() - began)
    # THEN this process used the share of a core it got (about one, on a machine not loaded by
    # others: a spinning thread), the other none, and the machine was not all idle
    assert abs(use["cores"]["me"] - share) <= 0.2 and 0.2 <= use["cores"]["me"] <= 1.05
    assert use["cores"]["still"] == 0.0
    assert use["machine_idle"] is not None and use["machine_idle"] < 1.0
    assert "me 0." in describe(use) or "me 1." in describe(use)


def test_a_run_with_little_idle_is_marked_cpu_bound() -> None:
    ticks = iter([(100, 1_000), (110, 1_100)])  # 10 idle ticks of 100: 10 %
    assert CpuWatch({}, ticks=lambda: next(ticks)).start().stop()["cpu_bound"] is True
    ticks = iter([(100, 1_000), (130, 1_100)])  # 30 %
    assert CpuWatch({}, ticks=lambda: next(ticks)).start().stop()["cpu_bound"] is False
    use = {"cores": {"runtime": 0.9, "S3": 0.8}, "machine_idle": BOUND_IDLE / 2, "cpu_bound": True}
    assert describe(use) == "runtime 0.90, S3 0.80, idle 8% **CPU-bound**"
    use = {"cores": {"runtime": 0.3}, "machine_idle": 0.6, "cpu_bound": False}
    assert describe(use) == "runtime 0.30, idle 60%"


def test_an_unknown_process_costs_nothing() -> None:
    assert process_seconds(None)() == 0.0
    assert process_seconds(2**31 - 1)() == 0.0  # no such pid


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")
def test_the_machine_ticks_grow() -> None:
    idle, total = machine_ticks()
    time.sleep(0.05)  # not waiting for work: letting the kernel's tick counters move
    assert machine_ticks()[1] > total >= idle > 0


def test_the_hiding_sizes_can_be_chosen_on_the_command_line() -> None:
    from bench.run import choose_plan, parse_args

    plan = choose_plan(parse_args(["--quick", "--hiding", "600,3000,800"]))
    assert (plan.hiding_messages, plan.hiding_packed, plan.hiding_pool_messages) == (
        600,
        3_000,
        800,
    )

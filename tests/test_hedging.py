"""When a read is raced (`s3queue.storage.hedging`): after its kind's recent 95th percentile,
never sooner than the floor, never before the warm-up, never a write, within the budget."""

from __future__ import annotations

from s3queue.storage import hedging
from s3queue.storage.hedging import Hedging


def test_no_race_before_the_warm_up_nor_for_a_write() -> None:
    policy = Hedging()
    for _ in range(hedging.WARMUP - 1):
        policy.observe("GetObject", 100.0, raced=False)
    assert policy.after_ms("GetObject") is None
    policy.observe("GetObject", 100.0, raced=False)
    assert policy.after_ms("GetObject") == 100.0
    for _ in range(100):
        policy.observe("PutObject", 100.0, raced=False)
    assert policy.after_ms("PutObject") is None
    assert policy.after_ms("ListObjectsV2") is None  # a kind of its own


def test_the_race_starts_at_the_recent_95th_percentile_and_never_below_the_floor() -> None:
    policy = Hedging()
    for i in range(hedging.SAMPLES):  # 1..256 ms: the 95th percentile is 244
        policy.observe("ListObjectsV2", float(i % hedging.SAMPLES + 1), raced=False)
    assert policy.after_ms("ListObjectsV2") == 244.0
    near = Hedging()
    for _ in range(hedging.SAMPLES):
        near.observe("GetObject", 1.5, raced=False)  # a server next door
    assert near.after_ms("GetObject") == hedging.FLOOR_MS


def test_the_budget_stops_races_until_enough_reads_went_unraced() -> None:
    policy = Hedging()
    for _ in range(hedging.SAMPLES):
        policy.observe("GetObject", 50.0, raced=False)
    spent = int(hedging.BUDGET * hedging.SAMPLES)
    for _ in range(spent):
        assert policy.after_ms("GetObject") is not None
        policy.observe("GetObject", 300.0, raced=True)
    assert policy.after_ms("GetObject") is None  # 8 % of the last 256 raced
    for _ in range(hedging.SAMPLES):
        policy.observe("GetObject", 50.0, raced=False)
    assert policy.after_ms("GetObject") is not None

"""Unit: recurring schedules (the ``schedule`` setting) on MemoryStorage and a FakeClock."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from s3queue.common.clock import FakeClock
from s3queue.contract.discovery import read_handler
from s3queue.contract.environment import QueueMap
from s3queue.contract.schedule import Schedule, slot_id, slot_text
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.schedules import SLOT_ATTRIBUTE, Schedules
from s3queue.dispatching.service import ServeSettings, serve
from s3queue.errors import ConfigError
from s3queue.local.cli import main
from s3queue.local.schedule_commands import schedule_rows
from s3queue.message import Message
from s3queue.storage import MemoryStorage
from s3queue.storage.base import iter_keys
from s3queue.working.worker import Worker

PREFIX = "s3queue/ticks"


def at(text: str) -> int:
    """Milliseconds since the epoch of an ISO time in UTC."""
    return round(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


class Bucket:
    """One queue on one MemoryStorage and one FakeClock; coordinators by owner."""

    def __init__(self, settings: QueueSettings, start: str = "2026-12-03T08:50:30") -> None:
        self.clock = FakeClock(at(start))
        self.storage = MemoryStorage(self.clock)
        self.settings = settings
        self.invocations: list[dict[str, Any]] = []

    def coordinator(self, owner: str) -> Coordinator:
        return Coordinator(
            self.storage,
            "ticks",
            invoker=self.invocations.append,
            settings=self.settings,
            clock=self.clock,
            owner=owner,
        )

    def messages(self) -> list[str]:
        return sorted(e.key for e in iter_keys(self.storage, f"{PREFIX}/msg/"))

    def markers(self) -> list[str]:
        return sorted(e.key.rsplit("/", 1)[1] for e in iter_keys(self.storage, f"{PREFIX}/ids/"))


# --- the setting ---------------------------------------------------------------------------


def test_cron_slots_are_utc_minutes_of_the_expression() -> None:
    schedule = Schedule.parse("*/5 * * * *")
    assert schedule.latest(at("2026-12-03T08:54:59")) == at("2026-12-03T08:50:00")
    assert schedule.latest(at("2026-12-03T08:55:00")) == at("2026-12-03T08:55:00")
    assert schedule.following(at("2026-12-03T08:55:00"), 2) == [
        at("2026-12-03T09:00:00"),
        at("2026-12-03T09:05:00"),
    ]
    daily = Schedule.parse("30 2 * * 1")  # Mondays at 02:30 UTC
    assert daily.following(at("2026-12-03T08:50:00")) == [at("2026-12-07T02:30:00")]


def test_interval_slots_fall_on_multiples_of_the_interval_since_the_epoch() -> None:
    schedule = Schedule.parse(300)
    assert schedule.latest(at("2026-12-03T08:54:59")) == at("2026-12-03T08:50:00")
    assert schedule.following(at("2026-12-03T08:50:00"), 2) == [
        at("2026-12-03T08:55:00"),
        at("2026-12-03T09:00:00"),
    ]
    assert Schedule.parse(2.5).following(at("2026-12-03T08:50:00"), 2) == [
        at("2026-12-03T08:50:00") + 2500,
        at("2026-12-03T08:50:00") + 5000,
    ]


def test_a_slot_has_a_readable_id_and_time() -> None:
    slot = at("2026-12-03T08:50:00")
    assert slot_id(slot) == "schedule-20261203T085000Z"
    assert slot_text(slot) == "2026-12-03T08:50:00Z"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"schedule": "*/5 * * *"}, "five fields"),
        ({"schedule": "0 0 * * * *"}, "five fields"),
        ({"schedule": "61 * * * *"}, "not a valid cron expression"),
        ({"schedule": "* * 31 2 *"}, "not a valid cron expression"),
        ({"schedule": "every minute"}, "five fields"),
        ({"schedule": 0}, "at least 1 s"),
        ({"schedule": -60}, "at least 1 s"),
        ({"schedule": True}, "cron expression"),
        ({"schedule": [60]}, "cron expression"),
        ({"schedule_body": {"a": 1}}, "needs a schedule"),
        ({"schedule": 60, "schedule_body": {1, 2}}, "JSON value"),
        ({"schedule": 60, "schedule_catch_up": 0}, "schedule_catch_up must be positive"),
    ],
)
def test_a_bad_schedule_is_a_config_error(values: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        QueueSettings.from_mapping(values)


def test_discovery_names_the_file_of_a_bad_schedule(tmp_path: Path) -> None:
    path = tmp_path / "nightly.py"
    path.write_text('SETTINGS = {"schedule": "0 25 * * *"}\n\ndef handle(message):\n    pass\n')
    with pytest.raises(ConfigError, match=r"nightly\.py: schedule '0 25 \* \* \*' is not a valid"):
        read_handler(path)


def test_a_schedule_travels_to_the_coordinator_lambda_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "nightly.py"
    path.write_text(
        'SETTINGS = {"schedule": "0 3 * * *", "schedule_body": {"report": "daily", "n": [1]}}\n'
        "def handle(message):\n    pass\n"
    )
    settings = read_handler(path).settings
    assert settings.scheduled_body == {"n": [1], "report": "daily"}
    decoded = QueueMap.decode(QueueMap({"nightly": "s_nightly"}, {"nightly": settings}).encode())
    assert decoded.settings["nightly"] == settings
    assert QueueSettings.from_mapping(settings.to_dict()) == settings
    assert QueueSettings().delta() == {}


# --- enqueueing slots ----------------------------------------------------------------------


def test_racing_coordinators_enqueue_each_slot_exactly_once() -> None:
    # GIVEN a queue due every minute, and two coordinator processes (each its own Schedules)
    bucket = Bucket(QueueSettings(schedule="* * * * *"))
    runs = [(Schedules(bucket.clock), bucket.coordinator(owner)) for owner in ("a", "b")]

    # WHEN both enqueue at the same instants for ten minutes, on threads that start together
    def step(barrier: threading.Barrier, schedules: Schedules, coordinator: Coordinator) -> None:
        barrier.wait()
        schedules.enqueue_due([coordinator])

    for _ in range(10 * 4):
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=step, args=(barrier, *run)) for run in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        bucket.clock.advance(15)
    # THEN each slot (08:50 to 09:00) has one marker and one message
    slots = [at("2026-12-03T08:50:00") + minute * 60_000 for minute in range(11)]
    assert bucket.markers() == [slot_id(s) for s in slots]
    assert len(bucket.messages()) == len(slots)


def test_a_new_process_finds_the_slot_already_enqueued() -> None:
    bucket = Bucket(QueueSettings(schedule=60))
    first = Schedules(bucket.clock).enqueue_due([bucket.coordinator("a")])
    again = Schedules(bucket.clock).enqueue_due([bucket.coordinator("b")])
    assert first.enqueued == ("ticks",) and again.enqueued == ()
    assert again.tried == ("ticks",)  # a slot is waiting all the same: the run looks at once
    assert first.next_ms == again.next_ms == at("2026-12-03T08:51:00")
    assert len(bucket.messages()) == 1


def test_catch_up_after_a_gap_enqueues_the_latest_slot_once() -> None:
    # GIVEN a five-minute schedule whose 08:50 slot was enqueued
    bucket = Bucket(QueueSettings(schedule="*/5 * * * *"))
    schedules, coordinator = Schedules(bucket.clock), bucket.coordinator("a")
    schedules.enqueue_due([coordinator])
    # WHEN nothing runs for three hours, then coordinators run again (twice, and another one)
    bucket.clock.advance(3 * 3600)
    schedules.enqueue_due([coordinator])
    schedules.enqueue_due([coordinator])
    Schedules(bucket.clock).enqueue_due([bucket.coordinator("b")])
    # THEN only the latest missed slot (11:50) was added, not the 35 slots in between
    assert bucket.markers() == [slot_id(at(t)) for t in ("2026-12-03T08:50", "2026-12-03T11:50")]


def test_a_slot_older_than_the_catch_up_window_is_skipped() -> None:
    bucket = Bucket(QueueSettings(schedule="0 3 * * *", schedule_catch_up=3600))
    due = Schedules(bucket.clock).enqueue_due([bucket.coordinator("a")])  # 03:00 was 5 h ago
    assert due.enqueued == () and bucket.messages() == []
    bucket.clock.advance((at("2026-12-04T03:00:10") - bucket.clock.now_ms()) / 1000)
    due = Schedules(bucket.clock).enqueue_due([bucket.coordinator("a")])
    assert due.enqueued == ("ticks",) and bucket.markers() == ["schedule-20261204T030000Z"]


def test_the_handler_sees_the_slot_in_its_id_attributes_and_default_body() -> None:
    bucket = Bucket(QueueSettings(schedule=300))
    seen: list[Message] = []
    serve(
        [bucket.coordinator("a")],
        remaining_ms=lambda: 60_000,
        clock=bucket.clock,
        settings=ServeSettings(linger=0.0),
    )
    worker = Worker(bucket.storage, "ticks", clock=bucket.clock, rng=random.Random(1))
    for payload in bucket.invocations:
        worker.process(payload, seen.append)
    (message,) = seen
    assert message.id == "schedule-20261203T085000Z"
    assert message.attributes == {SLOT_ATTRIBUTE: "2026-12-03T08:50:00Z"}
    assert message.body == {"slot": "2026-12-03T08:50:00Z"}


def test_a_schedule_body_is_the_message_body() -> None:
    settings = QueueSettings.from_mapping({"schedule": 60, "schedule_body": {"report": "x"}})
    bucket = Bucket(settings)
    Schedules(bucket.clock).enqueue_due([bucket.coordinator("a")])
    serve(
        [bucket.coordinator("a")],
        remaining_ms=lambda: 60_000,
        clock=bucket.clock,
        settings=ServeSettings(linger=0.0),
    )
    worker = Worker(bucket.storage, "ticks", clock=bucket.clock, rng=random.Random(1))
    bodies: list[Any] = []
    for payload in bucket.invocations:
        worker.process(payload, lambda m: bodies.append(m.body))
    assert bodies == [{"report": "x"}]


def test_a_serving_loop_enqueues_each_slot_as_it_comes() -> None:
    # GIVEN a 10-second schedule served by one run that never lingers out (as `s3queue dev`)
    bucket = Bucket(QueueSettings(schedule=10), start="2026-12-03T08:50:05")
    end = bucket.clock.now_ms() + 60_000
    seen: list[tuple[str, int]] = []
    worker = Worker(bucket.storage, "ticks", clock=bucket.clock, rng=random.Random(1))

    def work(_queue: str, _result: Any) -> None:
        while bucket.invocations:
            worker.process(
                bucket.invocations.pop(0), lambda m: seen.append((m.id, bucket.clock.now_ms()))
            )

    # WHEN it serves for a minute (the clock moves only when the run waits)
    serve(
        [bucket.coordinator("a")],
        remaining_ms=lambda: end - bucket.clock.now_ms(),
        clock=bucket.clock,
        settings=ServeSettings(linger=None, reserve=0.0),
        on_tick=work,
    )
    # THEN every slot ran once, within one busy interval of its time (the first on catch-up)
    slots = [at("2026-12-03T08:50:00") + i * 10_000 for i in range(7)]
    assert [message_id for message_id, _ in seen] == [slot_id(s) for s in slots]
    late = [handled - slot for (_, handled), slot in zip(seen[1:], slots[1:], strict=True)]
    assert max(late) <= 500


# --- s3queue schedules ---------------------------------------------------------------------


def test_s3queue_schedules_lists_the_next_slots_of_each_scheduled_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nightly.py").write_text(
        'SETTINGS = {"schedule": "0 3 * * *"}\ndef handle(m): ...\n'
    )
    (tmp_path / "ticker.py").write_text('SETTINGS = {"schedule": 10}\ndef handle(m): ...\n')
    (tmp_path / "plain.py").write_text("def handle(m): ...\n")
    rows = schedule_rows(str(tmp_path), at("2026-12-03T08:50:05"), 2)
    assert rows == [
        ["nightly", "cron '0 3 * * *' (UTC)", "2026-12-04T03:00:00Z", "schedule-20261204T030000Z"],
        ["", "", "2026-12-05T03:00:00Z", "schedule-20261205T030000Z"],
        ["ticker", "every 10 s", "2026-12-03T08:50:10Z", "schedule-20261203T085010Z"],
        ["", "", "2026-12-03T08:50:20Z", "schedule-20261203T085020Z"],
    ]
    assert main(["schedules", "--handlers", str(tmp_path), "--next", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["queue", "schedule", "next", "slot", "(UTC)", "message", "id"]
    assert [line.split()[0] for line in lines[1:]] == ["nightly", "ticker"]


def test_s3queue_schedules_names_the_file_of_a_bad_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.py").write_text('SETTINGS = {"schedule": "0 3 * *"}\ndef handle(m): ...\n')
    assert main(["schedules", "--handlers", str(tmp_path)]) == 2
    assert (
        "bad.py: schedule '0 3 * *': a cron expression has five fields" in capsys.readouterr().err
    )

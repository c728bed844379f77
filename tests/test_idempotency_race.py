"""`S3PersistenceLayer` on a real S3 server (SeaweedFS): races, and the requests per call."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from s3queue.common.clock import FakeClock, SystemClock
from s3queue.idempotency import S3PersistenceLayer
from s3queue.storage.s3 import S3Storage

pytestmark = [
    pytest.mark.s3,
    pytest.mark.filterwarnings("ignore:Couldn't determine the remaining time"),
]

THREADS = 16
ROUNDS = 5
HOUR = 3600


class Round:
    """One idempotent function; its first execution holds until every other caller returned.

    So every caller but the one that runs meets the record in progress, whatever the timing.
    """

    def __init__(self, store: S3PersistenceLayer) -> None:
        self.executions: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.outcomes: dict[str, Any] = {}
        self._lock = threading.Lock()

        def charge(order: dict[str, Any]) -> dict[str, Any]:
            with self._lock:
                self.executions.append(threading.current_thread().name)
            self.entered.set()
            assert self.release.wait(timeout=120)
            return {"charged": order["amount"], "by": threading.current_thread().name}

        config = IdempotencyConfig(event_key_jmespath="id")
        self.charge: Callable[..., Any] = idempotent_function(
            data_keyword_argument="order", persistence_store=store, config=config
        )(charge)

    def call(self, order: dict[str, Any], start: threading.Barrier) -> None:
        start.wait()
        try:
            outcome: Any = self.charge(order=order)
        except IdempotencyAlreadyInProgressError as exc:
            outcome = exc
        with self._lock:
            self.outcomes[threading.current_thread().name] = outcome

    def race(self, order: dict[str, Any]) -> None:
        """THREADS callers at once; the losers are joined before the winner may finish."""
        start = threading.Barrier(THREADS)
        threads = [
            threading.Thread(target=self.call, args=(order, start), name=f"caller-{n}")
            for n in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        try:
            assert self.entered.wait(timeout=120)
            (winner,) = self.executions
            for thread in threads:
                if thread.name != winner:
                    thread.join()
        finally:
            self.release.set()  # also when the test fails: no thread is left waiting
            for thread in threads:
                thread.join()


def test_sixteen_callers_with_one_key_execute_once_every_round(
    shared_s3_client: Any, bucket: str
) -> None:
    store = S3PersistenceLayer(storage=S3Storage(shared_s3_client, bucket))
    for round_ in range(ROUNDS):
        order = {"id": f"order-{round_}", "amount": round_}
        game = Round(store)
        game.race(order)
        (winner,) = game.executions
        assert game.outcomes.pop(winner) == {"charged": round_, "by": winner}
        assert len(game.outcomes) == THREADS - 1
        assert all(isinstance(o, IdempotencyAlreadyInProgressError) for o in game.outcomes.values())
        # a caller after the winner finished gets the stored result, without executing
        assert game.charge(order=order) == {"charged": round_, "by": winner}
        assert game.executions == [winner]


def test_sixteen_callers_replacing_one_expired_record_execute_once(
    shared_s3_client: Any, bucket: str
) -> None:
    clock = FakeClock(start_ms=SystemClock().now_ms())
    store = S3PersistenceLayer(storage=S3Storage(shared_s3_client, bucket), clock=clock)
    order = {"id": "order-x", "amount": 7}
    seed = Round(store)
    seed.release.set()
    seed.charge(order=order)
    for _ in range(3):
        clock.advance(HOUR + 1)  # the previous round's completed record has expired
        game = Round(store)
        game.race(order)
        (winner,) = game.executions
        assert game.outcomes.pop(winner) == {"charged": 7, "by": winner}
        assert all(isinstance(o, IdempotencyAlreadyInProgressError) for o in game.outcomes.values())
        (entry,) = store.storage.list(store.records_prefix).entries
        found = store.storage.get(entry.key)
        assert found is not None
        assert json.loads(json.loads(found.body)["data"])["by"] == winner


def test_requests_per_call_are_the_documented_ones(s3_client: Any, bucket: str) -> None:
    sent: Counter[str] = Counter()
    s3_client.meta.events.register(
        "before-send.s3", lambda event_name, **_: sent.update([event_name.rsplit(".", 1)[-1]])
    )
    clock = FakeClock(start_ms=SystemClock().now_ms())
    store = S3PersistenceLayer(storage=S3Storage(s3_client, bucket), clock=clock)
    failures = [ValueError("declined")]

    def charge(order: dict[str, Any]) -> str:
        if failures:
            raise failures.pop()
        return "ok"

    guarded = idempotent_function(
        data_keyword_argument="order",
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="id"),
    )(charge)

    def requests(call: Callable[[], Any]) -> dict[str, int]:
        sent.clear()
        with contextlib.suppress(ValueError):
            call()
        return dict(sent)

    order = {"id": "o-1"}
    assert requests(lambda: guarded(order=order)) == {"PutObject": 1, "DeleteObject": 1}
    assert requests(lambda: guarded(order=order)) == {"PutObject": 2}
    assert requests(lambda: guarded(order=order)) == {
        "PutObject": 1,
        "HeadObject": 1,
        "GetObject": 1,
    }
    clock.advance(HOUR + 1)
    assert requests(lambda: guarded(order=order)) == {
        "PutObject": 3,
        "HeadObject": 1,
        "GetObject": 1,
    }

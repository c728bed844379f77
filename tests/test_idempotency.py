"""`S3PersistenceLayer` under Powertools Idempotency, on MemoryStorage with a fake clock.

Powertools reads ``datetime.now()`` itself (record status, in-progress expiry from the Lambda
remaining time), so the fake clock starts at the current time and only moves forward by far
more than a test takes: the layer and Powertools then agree on every expiry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import (
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from s3queue.common.clock import FakeClock, SystemClock
from s3queue.idempotency import S3PersistenceLayer
from s3queue.storage import MemoryStorage, Object

HOUR = 3600
# Powertools warns on every call made without a Lambda context; one test asserts it.
pytestmark = pytest.mark.filterwarnings("ignore:Couldn't determine the remaining time")


class Crash(BaseException):
    """A process dying mid-function (Lambda timeout, OOM): Powertools cleans nothing up."""


def crash(order: dict[str, Any]) -> None:
    raise Crash


@dataclass
class LambdaContext:
    """The part of Lambda's context object Powertools reads."""

    remaining_ms: int = 60_000
    function_name: str = "worker"
    aws_request_id: str = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=SystemClock().now_ms())


@pytest.fixture
def storage(clock: FakeClock) -> MemoryStorage:
    return MemoryStorage(clock)


def layer(storage: MemoryStorage, clock: FakeClock, **options: Any) -> S3PersistenceLayer:
    return S3PersistenceLayer(storage=storage, clock=clock, **options)


def guarded(
    store: S3PersistenceLayer,
    body: Callable[[dict[str, Any]], Any] | None = None,
    config: IdempotencyConfig | None = None,
) -> tuple[Callable[..., Any], list[dict[str, Any]]]:
    """`charge(order=...)` made idempotent on `store`, and the list of its executions."""
    calls: list[dict[str, Any]] = []

    def charge(order: dict[str, Any]) -> Any:
        calls.append(order)
        return body(order) if body else {"charged": order["amount"], "run": len(calls)}

    config = config or IdempotencyConfig(event_key_jmespath="id")
    return idempotent_function(
        data_keyword_argument="order", persistence_store=store, config=config
    )(charge), calls


def records(storage: MemoryStorage) -> dict[str, dict[str, Any]]:
    """Every stored record, decoded, by key."""
    out: dict[str, dict[str, Any]] = {}
    for entry in storage.list("").entries:
        found = storage.get(entry.key)
        assert found is not None
        out[entry.key] = json.loads(found.body)
    return out


def only_record(storage: MemoryStorage) -> dict[str, Any]:
    (record,) = records(storage).values()
    return record


def test_a_new_key_runs_once_and_stores_a_completed_record(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    charge, calls = guarded(layer(storage, clock))
    assert charge(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert len(calls) == 1
    ((key, record),) = records(storage).items()
    name = "test-func.test_idempotency.guarded.%3Clocals%3E.charge"
    assert key.startswith(f"s3queue/_idempotency/{name}/")
    assert record["status"] == "COMPLETED"
    assert record["expiration"] == clock.now_ms() // 1000 + HOUR
    assert json.loads(record["data"]) == {"charged": 5, "run": 1}
    assert "in_progress_expiration" not in record


def test_a_completed_key_returns_the_stored_result_without_running(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    charge, calls = guarded(layer(storage, clock))
    first = charge(order={"id": "o-1", "amount": 5})
    clock.advance(HOUR - 1)
    assert charge(order={"id": "o-1", "amount": 5}) == first
    assert len(calls) == 1


def test_a_completed_record_that_expired_is_replaced_and_the_function_runs_again(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    charge, calls = guarded(layer(storage, clock))
    charge(order={"id": "o-1", "amount": 5})
    clock.advance(HOUR + 1)
    assert charge(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 2}
    assert len(calls) == 2
    record = only_record(storage)
    assert (record["status"], json.loads(record["data"])["run"]) == ("COMPLETED", 2)
    assert record["expiration"] == clock.now_ms() // 1000 + HOUR


def test_a_call_while_another_is_in_progress_raises_already_in_progress(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    # GIVEN container A's call crashed mid-function: its record stays INPROGRESS, with an
    # in-progress expiry from A's Lambda remaining time (60 s)
    config_a = IdempotencyConfig(event_key_jmespath="id")
    config_a.register_lambda_context(LambdaContext(remaining_ms=60_000))

    charge_a, _ = guarded(layer(storage, clock), crash, config_a)
    with pytest.raises(Crash):
        charge_a(order={"id": "o-1", "amount": 5})
    assert only_record(storage)["status"] == "INPROGRESS"
    assert "in_progress_expiration" in only_record(storage)
    # WHEN container B calls with the same key before that expiry THEN it is refused
    charge_b, calls_b = guarded(layer(storage, clock))
    with pytest.raises(IdempotencyAlreadyInProgressError):
        charge_b(order={"id": "o-1", "amount": 5})
    assert calls_b == []
    # WHEN the in-progress expiry has passed THEN B replaces the record and runs
    clock.advance(61)
    assert charge_b(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert only_record(storage)["status"] == "COMPLETED"


def test_a_reentrant_call_sees_its_own_record_in_progress(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    store = layer(storage, clock)
    inner: list[Any] = []
    charge, calls = guarded(store, lambda order: inner.append(charge(order=order)))
    with pytest.raises(IdempotencyAlreadyInProgressError):
        charge(order={"id": "o-1", "amount": 5})
    assert (len(calls), inner) == (1, [])
    assert records(storage) == {}  # the outer call raised: its record is deleted


def test_without_remaining_time_an_in_progress_record_blocks_until_it_expires(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    crashing, _ = guarded(layer(storage, clock), crash)
    with pytest.warns(UserWarning, match="remaining time"), pytest.raises(Crash):
        crashing(order={"id": "o-1", "amount": 5})
    charge, calls = guarded(layer(storage, clock))
    clock.advance(HOUR - 1)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        charge(order={"id": "o-1", "amount": 5})
    clock.advance(2)
    assert charge(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert len(calls) == 1


def test_in_progress_ttl_bounds_a_record_without_remaining_time(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    crashing, _ = guarded(layer(storage, clock, in_progress_ttl=30), crash)
    with pytest.raises(Crash):
        crashing(order={"id": "o-1", "amount": 5})
    assert only_record(storage)["in_progress_expiration"] == clock.now_ms() + 30_000
    charge, calls = guarded(layer(storage, clock, in_progress_ttl=30))
    clock.advance(29)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        charge(order={"id": "o-1", "amount": 5})
    clock.advance(2)
    assert charge(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert len(calls) == 1


def test_a_payload_that_differs_from_the_stored_one_fails_validation(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="amount")
    charge, calls = guarded(layer(storage, clock), config=config)
    charge(order={"id": "o-1", "amount": 5})
    assert "validation" in only_record(storage)
    with pytest.raises(IdempotencyValidationError):
        charge(order={"id": "o-1", "amount": 6})
    assert charge(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert len(calls) == 1


def test_without_validation_no_payload_hash_is_stored(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    charge, _ = guarded(layer(storage, clock))
    charge(order={"id": "o-1", "amount": 5})
    assert "validation" not in only_record(storage)
    assert charge(order={"id": "o-1", "amount": 6}) == {"charged": 5, "run": 1}


def test_the_function_raising_deletes_the_record_and_the_next_call_runs(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    failures = [ValueError("card declined")]

    def flaky(order: dict[str, Any]) -> str:
        if failures:
            raise failures.pop()
        return "ok"

    charge, calls = guarded(layer(storage, clock), flaky)
    with pytest.raises(ValueError, match="declined"):
        charge(order={"id": "o-1", "amount": 5})
    assert records(storage) == {}
    assert charge(order={"id": "o-1", "amount": 5}) == "ok"
    assert len(calls) == 2


def test_a_late_owner_neither_overwrites_nor_deletes_the_record_that_replaced_its_own(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    # GIVEN A's call outlives its in-progress expiry and B takes the record over and completes
    # WHEN A finishes (first by returning, then in a second round by raising)
    # THEN B's completed record stays: A's update and delete are conditional on A's own ETag
    charge_b, calls_b = guarded(layer(storage, clock, in_progress_ttl=10))

    def slow(order: dict[str, Any]) -> str:
        clock.advance(11)
        charge_b(order=order)
        if order["amount"] < 0:
            raise ValueError("A fails late")
        return "A's result"

    charge_a, _ = guarded(layer(storage, clock, in_progress_ttl=10), slow)
    assert charge_a(order={"id": "o-1", "amount": 5}) == "A's result"
    assert json.loads(only_record(storage)["data"])["run"] == 1  # B's result, not A's
    with pytest.raises(ValueError, match="late"):
        charge_a(order={"id": "o-2", "amount": -1})
    assert len(records(storage)) == 2
    assert len(calls_b) == 2


class InterleavedStorage(MemoryStorage):
    """Runs `before` once just before the next GET, `between` once right after it returns."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.before: Callable[[], None] | None = None
        self.between: Callable[[], None] | None = None

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        hook, self.before = self.before, None
        if hook is not None:
            hook()
        found = super().get(key, if_match=if_match)
        hook, self.between = self.between, None
        if hook is not None:
            hook()
        return found


def test_a_record_deleted_between_the_refused_create_and_the_read_is_created_again(
    clock: FakeClock,
) -> None:
    # GIVEN B is in progress; A's create is refused, and B fails (deleting its record) before
    # A reads it WHEN A goes on THEN it creates the record again and runs
    storage = InterleavedStorage(clock)
    charge_a, calls_a = guarded(layer(storage, clock))
    crashing, _ = guarded(layer(storage, clock), crash)
    with pytest.raises(Crash):
        crashing(order={"id": "o-1", "amount": 5})
    (key,) = records(storage)
    storage.before = lambda: storage.delete(key)
    assert charge_a(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert len(calls_a) == 1
    assert records(storage)[key]["status"] == "COMPLETED"


def test_two_callers_replacing_one_expired_record_exactly_one_wins(clock: FakeClock) -> None:
    # GIVEN an expired record; A reads it, and before A's PUT If-Match, B replaces it and runs
    storage = InterleavedStorage(clock)
    charge_a, calls_a = guarded(layer(storage, clock))
    charge_b, calls_b = guarded(layer(storage, clock))
    charge_a(order={"id": "o-1", "amount": 5})
    clock.advance(HOUR + 1)
    storage.between = lambda: charge_b(order={"id": "o-1", "amount": 5})
    # WHEN A goes on THEN its If-Match on the ETag it read fails and it returns B's result
    assert charge_a(order={"id": "o-1", "amount": 5}) == {"charged": 5, "run": 1}
    assert (len(calls_a), len(calls_b)) == (1, 1)


def test_idempotent_lambda_handler_stores_the_in_progress_expiry_of_its_context(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    seen: list[dict[str, Any]] = []

    @idempotent(persistence_store=layer(storage, clock), config=IdempotencyConfig("order"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(only_record(storage))
        return {"statusCode": 200}

    context = LambdaContext(remaining_ms=5_000)
    assert handler({"order": "o-1"}, context) == {"statusCode": 200}
    assert handler({"order": "o-1"}, context) == {"statusCode": 200}
    (during,) = seen
    assert during["status"] == "INPROGRESS"
    assert during["expiration"] * 1000 - during["in_progress_expiration"] > HOUR * 1000 - 10_000
    assert "in_progress_expiration" not in only_record(storage)


def test_a_record_this_layer_did_not_write_is_a_persistence_error(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    store = layer(storage, clock)
    charge, calls = guarded(store)
    charge(order={"id": "o-1", "amount": 5})
    (key,) = records(storage)
    storage.put(key, b"not json")
    with pytest.raises(IdempotencyPersistenceLayerError):
        charge(order={"id": "o-1", "amount": 5})
    assert len(calls) == 1


def test_record_keys_quote_the_function_name_under_the_records_prefix(
    storage: MemoryStorage,
) -> None:
    store = S3PersistenceLayer(storage=storage, prefix="jobs")
    assert store.records_prefix == "jobs/_idempotency/"
    assert store.key_for("fn.mod.<locals>.f#ab12") == "jobs/_idempotency/fn.mod.%3Clocals%3E.f/ab12"
    assert (
        S3PersistenceLayer(storage=storage, queue="q").records_prefix == "s3queue/_idempotency/q/"
    )
    custom = S3PersistenceLayer(storage=storage, records_prefix="idem/")
    assert custom.key_for("a/b#ff") == "idem/a%2Fb/ff"


def test_from_env_uses_the_bucket_and_prefix_of_the_worker_environment() -> None:
    env = {
        "S3QUEUE_BUCKET": "jobs-bucket",
        "S3QUEUE_PREFIX": "jobs",
        "S3QUEUE_QUEUE": "send_email",
        "S3QUEUE_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    store = S3PersistenceLayer.from_env(env, in_progress_ttl=60)
    assert store.records_prefix == "jobs/_idempotency/send_email/"
    assert store.in_progress_ttl == 60
    assert getattr(store.storage, "bucket", None) == "jobs-bucket"


def test_a_layer_needs_a_bucket_or_a_storage() -> None:
    with pytest.raises(ValueError, match="bucket"):
        S3PersistenceLayer()


def test_import_s3queue_does_not_import_powertools() -> None:
    code = "import sys, s3queue; print(any('powertools' in m for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"

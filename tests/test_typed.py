"""Typed messages: a handler declares a pydantic model of its body (`s3queue.working.typed`)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Harness
from lambda_support import BUCKET, FakeContext, load_worker_app, moto_aws, restoring_logging
from pydantic import BaseModel, PositiveInt
from s3queue import InvalidBody, Message, PermanentError, Queue, run_local
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.errors import ConfigError
from s3queue.local.loader import load_handlers
from s3queue.storage.s3 import S3Storage
from s3queue.working.typed import Typed, bind, declared_model

FAST = {"backoff_base": 0.05, "backoff_cap": 0.2}


class Item(BaseModel):
    sku: str
    quantity: PositiveInt


class Seen:
    """Handlers of both forms that record what they received."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def message_form(self, message: Message[Item]) -> None:
        self.got.append(message)

    def model_form(self, item: Item) -> None:
        self.got.append(item)


def test_a_valid_body_reaches_the_handler_as_the_model() -> None:
    h = Harness()
    seen = Seen()
    first = h.queue.enqueue({"sku": "BOOK", "quantity": 2})
    h.queue.enqueue({"sku": "PEN", "quantity": "3"})  # lax mode, as pydantic's default
    h.tick()
    [result] = h.work(seen.message_form)
    assert result.count("done") == 2
    message = seen.got[0]
    assert isinstance(message, Message) and message.id == first and message.attempt == 1
    assert message.body == Item(sku="BOOK", quantity=2)
    assert seen.got[1].body.quantity == 3


def test_the_model_alone_when_the_parameter_is_the_model() -> None:
    h = Harness()
    seen = Seen()
    h.queue.enqueue({"sku": "BOOK", "quantity": 2})
    h.queue.enqueue(b'{"sku": "RAW", "quantity": 1}')  # bytes are parsed as JSON text
    h.tick()
    h.work(seen.model_form)
    assert seen.got == [Item(sku="BOOK", quantity=2), Item(sku="RAW", quantity=1)]


def test_an_invalid_body_is_dead_at_once_with_its_errors() -> None:
    # GIVEN retries allowed, and a batch with one good and two invalid bodies
    h = Harness(settings=QueueSettings(max_retries=5))
    seen = Seen()
    good = h.queue.enqueue({"sku": "BOOK", "quantity": 1})
    bad = h.queue.enqueue({"sku": "BOOK", "quantity": 0, "colour": "red"})
    text = h.queue.enqueue(b"not json at all")
    # WHEN the worker runs them
    h.tick()
    [result] = h.work(seen.message_form)
    # THEN the invalid ones are dead on their first attempt, never retried, never handled
    assert (result.count("done"), result.count("dead"), result.count("retry")) == (1, 2, 0)
    assert [m.id for m in seen.got] == [good]
    dead = {d["id"]: d for d in h.queue.dead_letters()}
    assert dead[bad]["attempts"] == 1 and len(dead[bad]["errors"]) == 1
    reason = dead[bad]["reason"]
    assert reason.startswith("InvalidBody: body is not a valid Item: 1 validation error: ")
    assert "quantity: Input should be greater than 0 (input: 0)" in reason
    assert dead[bad]["body"] == {"sku": "BOOK", "quantity": 0, "colour": "red"}
    assert "json_invalid" in dead[text]["reason"] or "Invalid JSON" in dead[text]["reason"]
    assert h.keys("msg/") == []
    assert h.drain(seen.message_form) == 0  # nothing left to retry


def test_a_stored_payload_is_validated_and_one_too_large_to_load_is_refused() -> None:
    # GIVEN two stored payloads (enqueue_file): one within max_message_bytes, one over it
    # (the producer inlines up to 256 KiB; the worker loads up to its max_message_bytes)
    h = Harness(settings=QueueSettings(max_message_bytes=400 * 1024, max_retries=5))
    seen = Seen()
    small = json.dumps({"sku": "S" * 300_000, "quantity": 2}).encode()
    large = json.dumps({"sku": "L" * 500_000, "quantity": 2}).encode()
    loaded = h.queue.enqueue_file(io.BytesIO(small), partition="acme", attributes={"k": "v"})
    refused = h.queue.enqueue_file(io.BytesIO(large))
    assert len(h.keys("blobs/")) == 2
    # WHEN a typed handler runs them
    h.drain(seen.message_form)
    # THEN the loaded one is validated (its partition and attributes kept); the other is dead
    # at once, its reason saying why: its body was never loaded, so there is nothing to validate
    [message] = seen.got
    assert message.id == loaded and message.body == Item(sku="S" * 300_000, quantity=2)
    assert (message.partition, message.attributes, message.size) == ("acme", {"k": "v"}, len(small))
    [dead] = h.queue.dead_letters()
    assert dead["id"] == refused and dead["attempts"] == 1
    assert dead["reason"].startswith(f"InvalidBody: payload of {len(large)} bytes is over ")


def test_every_error_is_named_with_its_field() -> None:
    typed = bind(Seen().model_form)
    assert isinstance(typed, Typed)
    with pytest.raises(InvalidBody) as caught:
        typed.parse({"quantity": -1})
    assert isinstance(caught.value, PermanentError)
    text = str(caught.value)
    assert "2 validation errors" in text and "sku: Field required" in text
    assert "quantity: Input should be greater than 0 (input: -1)" in text
    with pytest.raises(InvalidBody, match=r"\(body\): Input should be a valid dictionary"):
        typed.parse(["not", "an", "object"])


def test_untyped_handlers_are_left_alone() -> None:
    def plain(message):  # type: ignore[no-untyped-def]
        return message

    def annotated(message: Message) -> None: ...

    def generic(message: Message[dict[str, Any]]) -> None: ...

    hint_only_module: dict[str, Any] = {}  # `Message` imported under TYPE_CHECKING only
    exec("def hint_only(message: 'Message') -> None: ...", hint_only_module)
    hint_only = hint_only_module["hint_only"]

    for handler in (plain, annotated, generic, hint_only, print):
        assert bind(handler) is handler
    typed = bind(Seen().model_form)
    assert bind(typed) is typed  # binding twice is binding once


def test_an_unresolvable_model_annotation_is_a_config_error() -> None:
    def handle(message: Message[Missing]) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ConfigError, match="cannot resolve the annotation"):
        declared_model(handle)


def test_untyped_handlers_never_import_pydantic() -> None:
    # Cold start: the worker and its binding must not load pydantic for an untyped handler.
    code = textwrap.dedent(
        """
        import sys
        from s3queue.message import Message
        from s3queue.working.typed import bind
        from s3queue.working.worker import Worker

        def handle(message: Message) -> None: ...

        assert bind(handle) is handle
        print("pydantic" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


MODULE = """
from __future__ import annotations

from pydantic import BaseModel
from s3queue import Message


class Tag(BaseModel):
    key: str


class Job(BaseModel):  # a nested model: its string annotations resolve in the module
    name: str
    size: int
    tags: list[Tag] = []


def handle(message: Message[Job]) -> None:
    assert isinstance(message.body, Job)
    if message.body.size < 0:
        raise ValueError("negative size")
"""


def test_the_local_loader_binds_a_module_with_string_annotations(tmp_path: Path) -> None:
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "jobs.py").write_text(MODULE)
    [queue] = load_handlers(folder).values()
    assert isinstance(queue.handler, Typed) and queue.handler.model.__name__ == "Job"
    # a model imported for type checkers only cannot be validated against: said at load time
    other = tmp_path / "other" / "handlers"
    other.mkdir(parents=True)
    hidden = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from models import Job\n"
    (other / "jobs.py").write_text(MODULE.replace("class Job(BaseModel):", hidden + "class _J:"))
    with pytest.raises(
        ConfigError, match=r"jobs.py: .*cannot resolve the annotation 'Message\[Job\]'"
    ):
        load_handlers(other)


@pytest.mark.s3
def test_typed_messages_on_seaweedfs_through_the_local_runtime(
    shared_s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a typed handler module, and good, invalid and foreign (inbox) bodies on SeaweedFS
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "jobs.py").write_text(MODULE)
    queue = Queue("jobs", bucket=bucket, s3=shared_s3_client)
    queue.enqueue_many([{"name": f"j{i}", "size": i, "tags": [{"key": "k"}]} for i in range(5)])
    invalid = queue.enqueue({"name": "j", "size": "big"})
    failing = queue.enqueue({"name": "neg", "size": -1})
    shared_s3_client.put_object(
        Bucket=bucket, Key="s3queue/jobs/inbox/a.json", Body=b'{"name": "in", "size": 1}'
    )
    shared_s3_client.put_object(Bucket=bucket, Key="s3queue/jobs/inbox/b.json", Body=b"{}")
    overrides = {**FAST, "max_retries": 2}
    # WHEN the local runtime drains the queue
    summary = run_local(
        folder, bucket=bucket, s3=shared_s3_client, drain=True, overrides=overrides, timeout=60
    )
    # THEN valid bodies are done, invalid ones dead at attempt 1, a handler error retried
    assert summary.drained
    jobs = summary.queues["jobs"]
    assert (jobs.processed, jobs.dead_lettered, jobs.retried) == (6, 3, 2)
    dead = {d["id"]: d for d in summary.dead_letters["jobs"]}
    assert dead[invalid]["attempts"] == 1
    assert "size: Input should be a valid integer" in dead[invalid]["reason"]
    assert dead[failing]["attempts"] == 3 and dead[failing]["reason"] == "ValueError: negative size"
    [foreign] = [d for key, d in dead.items() if key not in (invalid, failing)]
    assert foreign["attempts"] == 1 and "name: Field required" in foreign["reason"]


ORDER = {
    "order_id": "A-1001",
    "lines": [{"sku": "BOOK-42", "quantity": 2}, {"sku": "PEN", "quantity": 1}],
    "ship_to": {"name": "Ada", "street": "12 St James's Sq", "city": "London", "country": "GB"},
}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from moto_aws(monkeypatch)


@pytest.fixture
def logging_restored() -> Iterator[None]:
    yield from restoring_logging()


def test_the_worker_lambda_validates_the_example_ship_order(
    aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, logging_restored: None
) -> None:
    # GIVEN the worker Lambda of the example queue ship_order, one valid and one invalid order
    monkeypatch.setenv("S3QUEUE_BUCKET", BUCKET)
    monkeypatch.setenv("S3QUEUE_QUEUE", "ship_order")
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    app = load_worker_app()
    app.container.cache_clear()
    app.metrics.clear_metrics()
    storage = S3Storage(aws, BUCKET)
    queue = Queue("ship_order", storage=storage)
    good = queue.enqueue(ORDER)
    bad = queue.enqueue({**ORDER, "lines": []})
    invocations: list[dict[str, Any]] = []
    Coordinator(storage, "ship_order", invoker=invocations.append).tick()
    # WHEN the Lambda runs the ticket
    try:
        result = app.handler(json.loads(json.dumps(invocations[0])), FakeContext())
    finally:
        app.container.cache_clear()
        app.metrics.clear_metrics()
    # THEN the valid order is done, the invalid one is dead at its first attempt
    [ticket] = result["tickets"]
    assert (ticket["done"], ticket["dead"], ticket["retry"]) == (1, 1, 0)
    assert (tmp_path / f"ship_order_{good}.slip.txt").read_text().startswith("Order A-1001")
    [dead] = queue.dead_letters()
    assert dead["id"] == bad and dead["attempts"] == 1
    assert "lines: List should have at least 1 item" in dead["reason"]

"""The example handler modules in ``functions/handlers/``, called as the worker calls them."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from s3queue import InvalidBody, PermanentError
from s3queue.message import Message
from s3queue.working.typed import Typed, bind

HANDLERS = Path(__file__).resolve().parents[1] / "functions" / "handlers"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", HANDLERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as `import` does: pydantic resolves annotations there
    spec.loader.exec_module(module)
    return module


send_email = load("send_email")
generate_report = load("generate_report")
ship_order = load("ship_order")


def message(body: Any, queue: str = "send_email", message_id: str = "01ABC") -> Message:
    return Message(
        id=message_id,
        body=body,
        attempt=1,
        enqueued_at=datetime(2024, 1, 1, tzinfo=UTC),
        group=None,
        queue=queue,
        idempotency_key=f"{queue}:{message_id}",
    )


def test_send_email_renders_the_template_into_the_outbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    send_email.handle(message({"to": "ada@example.com", "template": "welcome", "name": "Ada"}))
    (sent,) = tmp_path.glob("*.eml")
    assert sent.name == "send_email_01ABC.eml"
    text = sent.read_text()
    assert "To: ada@example.com" in text
    assert "Subject: Welcome, Ada" in text
    assert "Hello Ada," in text


def test_a_redelivered_email_overwrites_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    body = {"to": "ada@example.com", "template": "password_reset", "name": "Ada", "url": "u"}
    send_email.handle(message(body))
    send_email.handle(message(body))
    assert len(list(tmp_path.iterdir())) == 1


def test_send_email_without_outbox_only_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("S3QUEUE_OUTBOX", raising=False)
    caplog.set_level("INFO")
    send_email.handle(message({"to": "ada@example.com", "template": "welcome", "name": "Ada"}))
    assert "would send e-mail to ada@example.com" in caplog.text


@pytest.mark.parametrize(
    "body",
    [
        {"to": "not-an-address", "template": "welcome", "name": "Ada"},
        {"to": "ada@example.com\n", "template": "welcome", "name": "Ada"},
        {"to": "ada@example.com\nBcc: eve@example.com", "template": "welcome", "name": "Ada"},
        {"to": "ada@example.com", "template": "unknown", "name": "Ada"},
        {"to": "ada@example.com", "template": "welcome"},
        {"to": "ada@example.com", "template": "welcome", "name": "Ada\r\nBcc: eve"},
        ["not", "an", "object"],
    ],
)
def test_a_body_that_cannot_become_an_email_is_permanent(body: Any) -> None:
    with pytest.raises(PermanentError):
        send_email.handle(message(body))


def test_report_summarises_values() -> None:
    report = generate_report.handle(message({"values": [1, 2, 3, 4]}, queue="generate_report"))
    assert report == {"count": 4, "total": 10.0, "mean": 2.5, "p95": 4.0}


def test_report_aggregates_a_field_of_records_and_writes_the_outbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    records = [{"amount": value} for value in range(1, 101)]
    body = {"records": records, "field": "amount"}
    report = generate_report.handle(message(body, queue="generate_report"))
    assert (report["count"], report["total"], report["p95"]) == (100, 5050.0, 95.0)
    assert (tmp_path / "generate_report_01ABC.report.json").is_file()


@pytest.mark.parametrize(
    "body",
    [
        {"values": []},
        {"values": [1, "two"]},
        {"values": [1, True]},
        {"values": [float("nan")]},
        {"records": [{"amount": 1}, {"other": 2}], "field": "amount"},
        {"records": "nope", "field": "amount"},
        {"numbers": [1]},
        "just text",
    ],
)
def test_bad_report_data_raises_value_error_so_it_retries(body: Any) -> None:
    with pytest.raises(ValueError):
        generate_report.handle(message(body, queue="generate_report"))


ORDER = {
    "order_id": "A-1001",
    "lines": [{"sku": "BOOK-42", "quantity": 2}, {"sku": "PEN", "quantity": 3}],
    "ship_to": {
        "name": "Ada Lovelace",
        "street": "12 St James's Sq",
        "city": "London",
        "country": "GB",
    },
}


def test_ship_order_gets_an_order_and_writes_its_slip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    handle = bind(ship_order.handle)  # as the worker binds it
    assert isinstance(handle, Typed) and handle.model is ship_order.Order
    result = handle(message(ORDER, queue="ship_order"))
    assert result == {"order_id": "A-1001", "items": 5, "country": "GB"}
    slip = (tmp_path / "ship_order_01ABC.slip.txt").read_text()
    assert slip.splitlines() == [
        "Order A-1001",
        "Ship to: Ada Lovelace, 12 St James's Sq, London, GB",
        "  2 x BOOK-42",
        "  3 x PEN",
    ]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({**ORDER, "lines": []}, "lines: List should have at least 1 item"),
        ({**ORDER, "lines": [{"sku": "BOOK-42", "quantity": 0}]}, "lines.0.quantity: Input"),
        ({**ORDER, "gift": True}, "gift: Extra inputs are not permitted"),
        ({**ORDER, "ship_to": {**ORDER["ship_to"], "country": "gb"}}, "ship_to.country:"),
        ({"order_id": "A-1"}, "lines: Field required; ship_to: Field required"),
        ("just text", "(body): Input should be a valid dictionary"),
    ],
)
def test_ship_order_refuses_an_invalid_order_before_the_handler(body: Any, error: str) -> None:
    with pytest.raises(InvalidBody) as caught:
        bind(ship_order.handle)(message(body, queue="ship_order"))
    assert error in str(caught.value)

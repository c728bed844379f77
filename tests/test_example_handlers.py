"""The example handler modules in ``functions/handlers/``, called as the worker calls them."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from s3queue import PermanentError
from s3queue.model import Message

HANDLERS = Path(__file__).resolve().parents[1] / "functions" / "handlers"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", HANDLERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


send_email = load("send_email")
generate_report = load("generate_report")


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

"""The ``send_email`` example as on Lambda: its idempotency records in the bucket (SeaweedFS)."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from s3queue.local.seaweed import ANY_CREDENTIALS, EmbeddedS3
from s3queue.message import Message
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

HANDLER = Path(__file__).resolve().parents[1] / "functions" / "handlers" / "send_email.py"
BODY = {"to": "ada@example.com", "template": "welcome", "name": "Ada"}


def message(message_id: str, attempt: int = 1) -> Message:
    return Message(
        id=message_id,
        body=BODY,
        attempt=attempt,
        enqueued_at=datetime(2024, 1, 1, tzinfo=UTC),
        group=None,
        queue="send_email",
        idempotency_key=f"send_email:{message_id}",
    )


@pytest.fixture
def send_email(
    seaweed: EmbeddedS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    """The module imported the way the worker Lambda imports it: with the stack's variables."""
    monkeypatch.setenv("S3QUEUE_BUCKET", bucket)
    monkeypatch.setenv("S3QUEUE_QUEUE", "send_email")
    monkeypatch.setenv("S3QUEUE_ENDPOINT_URL", seaweed.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ANY_CREDENTIALS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ANY_CREDENTIALS[1])
    monkeypatch.setenv("S3QUEUE_OUTBOX", str(tmp_path))
    spec = importlib.util.spec_from_file_location("example_send_email_on_s3", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_redelivered_message_does_not_send_its_email_twice(
    send_email: ModuleType, shared_s3_client: object, bucket: str, tmp_path: Path
) -> None:
    send_email.handle(message("01ABC"))
    sent = tmp_path / "send_email_01ABC.eml"
    assert sent.is_file()
    sent.unlink()
    # WHEN the message comes again (its worker died after sending, before committing)
    send_email.handle(message("01ABC", attempt=2))
    # THEN the e-mail is not sent again; another message is
    assert not sent.exists()
    send_email.handle(message("01ABD"))
    assert (tmp_path / "send_email_01ABD.eml").is_file()
    storage = S3Storage(shared_s3_client, bucket)
    entries = storage.list("s3queue/_idempotency/send_email/").entries
    assert len(entries) == 2
    for entry in entries:
        found = storage.get(entry.key)
        assert found is not None
        assert json.loads(found.body)["status"] == "COMPLETED"

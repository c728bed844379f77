"""The one-message commands on SeaweedFS: ``dlq show|redrive|delete --id``, ``peek``,
``cancel``; each bad input is one line and exit code 2, and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue import Queue
from s3queue.contract.settings import QueueSettings
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage.s3 import S3Storage
from test_cli import Cli, credentials  # noqa: F401 - the fixture

pytestmark = pytest.mark.s3


@pytest.fixture
def cli(seaweed: EmbeddedS3, bucket: str, capsys: Any, credentials: None) -> Cli:  # noqa: F811
    return Cli(seaweed.endpoint_url, bucket, capsys)


@pytest.fixture
def reports(shared_s3_client: Any, bucket: str) -> Harness:
    """Queue ``jobs`` on the test's bucket with two dead letters (ids bad-1, bad-2)."""
    storage = S3Storage(shared_s3_client, bucket, sleep=lambda _: None)
    h = Harness(storage=storage, settings=QueueSettings(max_retries=0))
    for name in ("bad-1", "bad-2"):
        h.queue.enqueue({"name": name}, id=name, attributes={"tenant": "acme"})
    h.drain(Recorder(fail=lambda m: ValueError(f"cannot handle {m.body['name']}")))
    return h


def test_dlq_show_prints_a_dead_letter_with_its_tracebacks(cli: Cli, reports: Harness) -> None:
    out = cli.ok("dlq", "show", "jobs", "--id", "bad-1")
    assert "dead letter bad-1 of jobs" in out and "attributes: tenant=acme" in out
    assert 'body (json): {"name": "bad-1"}' in out
    assert "Traceback (most recent call last)" in out and "ValueError: cannot handle bad-1" in out
    doc = json.loads(cli.ok("dlq", "show", "jobs", "--id", "bad-2", "--json"))
    assert doc["id"] == "bad-2" and doc["errors"][0]["traceback"].startswith("Traceback")


def test_dlq_redrive_and_delete_one_id(cli: Cli, reports: Harness) -> None:
    assert cli.ok("dlq", "redrive", "jobs", "--id", "bad-1") == "redrove 1 messages of jobs\n"
    assert cli.ok("dlq", "delete", "jobs", "--id", "bad-2") == "deleted 1 dead letters of jobs\n"
    assert reports.queue.dead_letters() == []
    assert [m["body"] for m in reports.queue.peek(5)] == [{"name": "bad-1"}]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["dlq", "show", "jobs"], "dlq show needs --id"),
        (["dlq", "show", "jobs", "--id", "nope"], "no dead letter with id nope"),
        (["dlq", "redrive", "jobs", "--id", "nope"], "1 of the ids given have no dead letter"),
        (["dlq", "delete", "jobs"], "--all to delete every dead letter"),
        (["dlq", "delete", "jobs", "--id", "bad-1", "--all"], "not both"),
        (["dlq", "list", "jobs", "--id", "bad-1"], "dlq list takes no --id"),
        (["dlq", "show", "jobs", "--id", "a/b"], "invalid message id"),
        (["cancel", "jobs", "nope"], "no message with the explicit id 'nope'"),
        (["peek", "nosuch"], "unknown queue 'nosuch'"),
        (["peek", "jobs", "-n", "x"], "expected a whole number"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    cli: Cli, reports: Harness, args: list[str], says: str
) -> None:
    code, out, err = cli(*args)
    assert code == 2 and out == "" and says in err and len(err.splitlines()) == 1
    assert [d["id"] for d in reports.queue.dead_letters()] == ["bad-1", "bad-2"]


def test_dlq_delete_all(cli: Cli, reports: Harness) -> None:
    assert cli.ok("dlq", "delete", "jobs", "--all") == "deleted 2 dead letters of jobs\n"
    assert cli.ok("dlq", "list", "jobs") == "0 dead letters in jobs\n"


def test_peek_and_cancel(cli: Cli, shared_s3_client: Any, bucket: str) -> None:
    queue = Queue("mail", storage=S3Storage(shared_s3_client, bucket))
    queue.enqueue({"to": "ada@example.com"}, id="welcome-ada")
    queue.enqueue("later", id="later", delay=600)
    out = cli.ok("peek", "mail")
    assert "welcome-ada  pending" in out and "later        delayed" in out
    assert '{"to": "ada@example.com"}' in out and "2 messages shown of mail" in out
    [first] = json.loads(cli.ok("peek", "mail", "-n", "1", "--json"))
    assert first["id"] == "welcome-ada" and first["body"] == {"to": "ada@example.com"}
    assert cli.ok("cancel", "mail", "later") == "cancelled later in mail: it will not run\n"
    assert cli.ok("cancel", "mail", "later") == "later in mail was already cancelled\n"
    assert [m["id"] for m in queue.peek(5)] == ["welcome-ada"]


def test_cancel_too_late_exits_3(cli: Cli, shared_s3_client: Any, bucket: str) -> None:
    h = Harness(storage=S3Storage(shared_s3_client, bucket, sleep=lambda _: None))
    h.queue.enqueue("x", id="gone")
    h.drain(Recorder())
    code, out, err = cli("cancel", "jobs", "gone")
    assert code == 3 and out == "" and "too late" in err and "already handled" in err

"""The ``s3queue`` command line: every command, and a clear one-line error for each failure."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from s3queue import PermanentError, Queue, run_local
from s3queue.local.cli import main
from s3queue.local.commands import parse_body
from s3queue.local.console import ProgressLine, UsageError
from s3queue.local.hosting import DataDirBusy, PortBusy
from s3queue.local.seaweed import EmbeddedS3
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.records import Record, decode_records
from s3queue.storage.s3 import S3Storage

REPO = Path(__file__).resolve().parents[1]
HANDLERS = str(REPO / "functions" / "handlers")


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any key pair: the embedded server accepts all; boto3 needs one to sign."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "s3queue")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3queue-secret")
    for name in ("S3QUEUE_BUCKET", "S3QUEUE_ENDPOINT_URL", "S3QUEUE_PREFIX", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


class Cli:
    """Runs `main` against one bucket of the session's SeaweedFS."""

    def __init__(self, endpoint: str, bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.base = ["--endpoint-url", endpoint, "--bucket", bucket]
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*self.base, *args])
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, err
        return out


@pytest.fixture
def cli(seaweed: EmbeddedS3, bucket: str, capsys: Any, credentials: None) -> Cli:
    return Cli(seaweed.endpoint_url, bucket, capsys)


def test_body_is_json_when_it_parses_else_text(tmp_path: Path) -> None:
    assert parse_body('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parse_body("42") == 42
    assert parse_body("hello world") == "hello world"
    (tmp_path / "body.json").write_text('{"to": "ada@example.com"}')
    assert parse_body(f"@{tmp_path / 'body.json'}") == {"to": "ada@example.com"}
    (tmp_path / "blob.bin").write_bytes(b"\xff\x00raw")
    assert parse_body(f"@{tmp_path / 'blob.bin'}") == b"\xff\x00raw"
    with pytest.raises(UsageError, match="cannot read body file"):
        parse_body(f"@{tmp_path / 'missing.json'}")
    with pytest.raises(UsageError, match="not valid JSON"):
        parse_body("{not json", require_json=True)


def test_progress_redraws_one_line_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    line = ProgressLine(stream)
    state = {"pending": 2, "delayed": 1, "in_flight": 3, "processed": 4, "dlq": 0}
    line.update({"emails": {**state, "retried": 0, "dead_lettered": 0}})
    line.update({"emails": {**state, "processed": 5, "retried": 0, "dead_lettered": 0}})
    line.close()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.count("\x1b[K") == 2 and text.endswith("\n")
    assert "emails: 2 pending (+1 delayed), 3 in flight, 5 done, 0 DLQ" in text
    plain = io.StringIO()
    line = ProgressLine(plain, interval=60)
    line.update({"emails": {**state, "retried": 0, "dead_lettered": 0}})
    line.update({"emails": {**state, "processed": 9, "retried": 0, "dead_lettered": 0}})
    line.close()
    lines = plain.getvalue().splitlines()
    assert len(lines) == 2 and "4 done" in lines[0] and "9 done" in lines[1]  # first and last


def peek(client: Any, bucket: str, queue: str) -> list[Record]:
    """Every record pending in `queue`, read straight from the bucket."""
    storage = S3Storage(client, bucket)
    keys = QueueKeys("s3queue", queue)
    records: list[Record] = []
    for entry in storage.list(keys.msg).entries:
        obj = storage.get(entry.key)
        assert obj is not None
        records += decode_records(obj.body)
    return records


@pytest.mark.s3
def test_enqueue_stats_and_every_body_form(
    cli: Cli, tmp_path: Path, shared_s3_client: Any, bucket: str
) -> None:
    message_id = cli.ok("enqueue", "send_email", '{"to": "ada@example.com"}').strip()
    assert len(message_id) == 26
    cli.ok("enqueue", "send_email", "just text", "--delay", "600")
    (tmp_path / "body.json").write_text('{"to": "grace@example.com"}')
    cli.ok("enqueue", "send_email", f"@{tmp_path / 'body.json'}", "--id", "order-1")
    cli.ok("enqueue", "send_email", f"@{tmp_path / 'body.json'}", "--id", "order-1")
    cli.ok("enqueue", "generate_report", '{"values": [1]}', "--group", "acme")
    tagged = cli.ok("enqueue", "generate_report", "{}", "--attr", "tenant=acme", "--attr", "k=")
    records = peek(shared_s3_client, bucket, "generate_report")
    peeked = [r for r in records if r.id == tagged.strip()]
    assert peeked[0].attributes == {"tenant": "acme", "k": ""}
    stats = json.loads(cli.ok("stats", "send_email", "--json"))
    assert (stats["pending"], stats["delayed"]) == (2, 1)
    table = cli.ok("stats")
    assert table.splitlines()[0].split() == [
        "queue",
        "pending",
        "delayed",
        "in_flight",
        "dead",
        "tickets",
        "oldest_age_s",
        "paused",
    ]
    assert [row.split()[0] for row in table.splitlines()[1:]] == ["generate_report", "send_email"]
    cli.ok("enqueue", "send_email", '{"to": "t@acme.example"}', "--partition", "acme")
    rows = [row.split() for row in cli.ok("stats", "send_email", "--partitions").splitlines()]
    assert rows[0][5] == "dead"  # the columns: tests/test_cli_edges.py
    assert [row[1:4] for row in rows[1:]] == [["(default)", "2", "1"], ["acme", "1", "0"]]
    partitions = json.loads(cli.ok("stats", "send_email", "--json"))["partitions"]
    assert partitions["acme"]["pending"] == 1


@pytest.mark.s3
def test_enqueue_with_a_priority(cli: Cli, shared_s3_client: Any, bucket: str) -> None:
    cli.ok("enqueue", "send_email", '{"to": "a@example.com"}', "--priority", "9")
    cli.ok(
        "enqueue", "send_email", '{"to": "b@example.com"}', "--priority", "2", "--partition", "t7"
    )
    listed = shared_s3_client.list_objects_v2(Bucket=bucket, Prefix="s3queue/send_email/parts/")
    folders = sorted({o["Key"].split("/")[3] for o in listed["Contents"]})
    assert folders == ["t7~2", "~9"]
    for bad in (("--priority", "10"), ("--priority", "3", "--group", "g")):
        code, _, err = cli("enqueue", "send_email", "{}", *bad)
        assert code == 2 and "priority" in err


@pytest.mark.s3
def test_pause_and_resume_a_queue(cli: Cli) -> None:
    cli.ok("enqueue", "send_email", '{"to": "ada@example.com"}')
    assert "paused send_email" in cli.ok("pause", "send_email")
    stats = json.loads(cli.ok("stats", "send_email", "--json"))
    assert stats["paused"] is True and stats["held"]["paused"] == 1
    assert cli.ok("stats").splitlines()[1].split()[-1] == "True"
    code, _, err = cli("pause", "no_such_queue")
    assert code == 2 and "unknown queue 'no_such_queue'" in err
    assert "resumed send_email" in cli.ok("resume", "send_email")
    assert json.loads(cli.ok("stats", "send_email", "--json"))["paused"] is False


@pytest.mark.s3
def test_bad_input_is_one_line_and_exit_code_2(cli: Cli, tmp_path: Path) -> None:
    cases = [
        (("enqueue", "no_such_queue", "{}"), "unknown queue 'no_such_queue'"),
        (("enqueue", "send_email", "@/no/such/file.json"), "cannot read body file"),
        (("enqueue", "send_email", "{oops", "--json"), "body is not valid JSON"),
        (("enqueue", "Bad Name", "{}"), "invalid queue name"),
        (("stats", "no_such_queue"), "unknown queue 'no_such_queue'"),
        (("dlq", "list", "no_such_queue"), "unknown queue"),
        (("purge", "no_such_queue"), "has no objects"),
        (("delete", "no_such_queue"), "has no objects"),
        (("dev", "--set", "backoff_base"), "expected KEY=NUMBER"),
        (("dev", "--handlers", str(tmp_path / "none")), "does not exist"),
        (("enqueue", "send_email", "{}", "--delay", "-5"), "delay must be finite"),
        (("enqueue", "send_email", "{}", "--group", ""), "group must be a string of 1-128"),
        (("enqueue", "send_email", "{}", "--attr", "tenant"), "--attr 'tenant': use NAME=VALUE"),
        (("enqueue", "send_email", "{}", "--attr", "Tenant=a"), "invalid attribute name"),
        (("stats", "--endpoint-url", "not-a-url"), "--endpoint-url: expected an http(s) URL"),
        (("dlq", "list", "jobs", "--limit", "-1"), "--limit: expected a whole number"),
        (("dev", "--port", "80"), "--port: expected a port from 1024"),
    ]
    for args, message in cases:
        code, out, err = cli(*args)
        assert code == 2, (args, err)
        assert err.startswith("s3queue: error: ") and message in err, (args, err)
        assert err.count("\n") == 1 and out == ""


@pytest.mark.s3
def test_s3_trouble_is_one_line_and_exit_code_1(
    seaweed: EmbeddedS3, capsys: Any, credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = Cli(seaweed.endpoint_url, "no-such-bucket-anywhere", capsys)
    code, _, err = missing("stats")
    assert code == 1 and "bucket 'no-such-bucket-anywhere' does not exist" in err
    # An endpoint where nothing listens: a free port, closed.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = Cli(f"http://127.0.0.1:{port}", "b", capsys)("enqueue", "send_email", "{}")
    assert code == 1 and "no S3 server answered" in err and err.count("\n") == 1
    # No credentials anywhere: environment, files, instance metadata.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = Cli(seaweed.endpoint_url, "b", capsys)("stats")
    assert code == 1 and "no usable AWS credentials" in err and err.count("\n") == 1
    code, _, err = Cli(seaweed.endpoint_url, "", capsys)("stats")
    assert code == 2 and "no bucket" in err


@pytest.mark.s3
def test_dlq_list_redrive_purge_delete(cli: Cli, seaweed: EmbeddedS3, bucket: str) -> None:
    # GIVEN a queue with three dead letters and three pending messages (two packed in one object)
    client = seaweed.make_client()
    jobs = Queue("jobs", storage=S3Storage(client, bucket))
    jobs.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])

    def refuse(message: Any) -> None:
        raise PermanentError("refused by the test")

    assert run_local({"jobs": refuse}, bucket=bucket, s3=client, drain=True, timeout=30).drained
    jobs.enqueue({"n": 4}, id="order-4")
    jobs.enqueue_many([{"n": 5}, {"n": 6}])
    listed = cli.ok("dlq", "list", "jobs")
    assert "PermanentError: refused by the test" in listed and "3 dead letters in jobs" in listed
    limited = cli.ok("dlq", "list", "jobs", "--limit", "1").splitlines()
    assert len(limited) == 2 and limited[-1] == "showing 1 of 3 dead letters in jobs (--limit 1)"
    entries = json.loads(cli.ok("dlq", "list", "jobs", "--json"))
    assert [e["body"] for e in entries] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert all(e["attempts"] == 1 and e["body_encoding"] == "json" for e in entries)
    assert not [e for e in entries if "attempt" in e or "b64" in e]
    assert cli.ok("purge", "jobs").strip() == "purged 3 messages of jobs"
    assert cli.ok("dlq", "redrive", "jobs").strip() == "redrove 3 messages of jobs"
    assert json.loads(cli.ok("stats", "jobs", "--json"))["pending"] == 3
    purged = cli.ok("purge", "jobs", "--include-dlq").strip()
    assert purged == "purged 3 messages and dead letters of jobs"
    assert json.loads(cli.ok("stats", "jobs", "--json"))["pending"] == 0
    assert "deleted queue jobs" in cli.ok("delete", "jobs")
    assert cli("stats", "jobs")[0] == 2


@pytest.mark.s3
def test_gc_deletes_only_payloads_no_message_refers_to(
    cli: Cli, seaweed: EmbeddedS3, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a message with a payload, and an upload whose producer died before its record
    client = seaweed.make_client()
    jobs = Queue("jobs", storage=S3Storage(client, bucket))
    (tmp_path / "big.bin").write_bytes(os.urandom(300 * 1024))
    jobs.enqueue_file(tmp_path / "big.bin")
    orphan = jobs.keys.blob("lost-upload")
    client.put_object(Bucket=bucket, Key=orphan, Body=b"payload")
    # WHEN gc runs with the default grace period, then dry with none, then for real
    out = cli.ok("gc", "jobs").strip()
    assert out == "found 0 orphaned payloads of jobs (0 older than 168 h)"
    dry = cli.ok("gc", "jobs", "--grace-hours", "0", "--dry-run").splitlines()
    assert dry == [orphan, "found 1 orphaned payloads of jobs (2 older than 0 h)"]
    out = cli.ok("gc", "jobs", "--grace-hours", "0").strip()
    # THEN only the orphan went
    assert out == "deleted 1 orphaned payloads of jobs (2 older than 0 h)"
    left = client.list_objects_v2(Bucket=bucket, Prefix=jobs.keys.blobs)["Contents"]
    assert len(left) == 1 and left[0]["Key"] != orphan
    assert cli("gc", "jobs", "--grace-hours", "-1")[0] == 2


@pytest.mark.s3
def test_dev_drain_runs_the_handler_folder(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "jobs.py").write_text(
        "def handle(message):\n    if message.body == 'bad':\n        raise ValueError('bad')\n"
    )
    for body in ("a", "b", "bad"):
        cli.ok("enqueue", "jobs", body, "--handlers", str(folder))
    code, out, err = cli(
        "dev", "--handlers", str(folder), "--drain", "--set", "backoff_base=0.01", "--workers", "2"
    )
    assert code == 0, err
    assert "drained after" in out
    [row] = [line.split() for line in out.splitlines() if line.startswith("jobs")]
    assert row[1:] == ["2", "6", "5", "1", "0", "1"]  # processed failed retried dead redel dlq
    assert "jobs: 0 pending, 0 in flight, 2 done, 1 DLQ" in err  # the last progress line
    assert "DLQ jobs/" in out and "ValueError: bad" in out


@pytest.mark.s3
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    # The whole demo as `make demo` runs it, in a fresh folder, with its own embedded S3.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3QUEUE_"))}
    command = [sys.executable, "-m", "s3queue.local.cli", "demo", "--handlers", HANDLERS]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "drained after" in out and "DLQ generate_report/" in out
    assert "ValueError: nothing to aggregate" in out and "4 attempts" in out
    assert len(list((tmp_path / ".s3queue-dev" / "outbox").glob("*.eml"))) == 4
    # the command line's own client has room for every request its runtime makes at once
    assert "connections, but this runtime makes up to" not in done.stdout + done.stderr


@pytest.mark.s3
def test_ctrl_c_stops_dev_with_exit_code_130(cli: Cli, tmp_path: Path) -> None:
    # GIVEN a handler that presses Ctrl-C (SIGINT to this process) when it runs
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "jobs.py").write_text(
        "import os, signal\n\ndef handle(message):\n    os.kill(os.getpid(), signal.SIGINT)\n"
    )
    cli.ok("enqueue", "jobs", "go", "--handlers", str(folder))
    # WHEN dev runs it (not --drain: only Ctrl-C ends it)
    code, out, err = cli("dev", "--handlers", str(folder), "--workers", "1")
    # THEN it stops cleanly, prints its summary, and exits 130 as the docs say
    assert code == 130, err
    assert "stopped after" in out and "restart after editing" in err


@pytest.mark.s3
def test_closed_output_pipe_is_not_a_traceback(cli: Cli) -> None:
    # GIVEN a reader that closed the pipe before s3queue wrote (as `| head` does early)
    cli.ok("enqueue", "send_email", "{}", "--handlers", HANDLERS)
    read, write = os.pipe()
    os.close(read)
    command = [sys.executable, "-m", "s3queue.local.cli", *cli.base, "stats", "--json"]
    with os.fdopen(write, "wb") as stdout:
        done = subprocess.run(
            command, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60, check=False
        )
    # THEN no traceback, and the conventional exit code of a closed pipe
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


@pytest.mark.s3
def test_second_server_on_one_data_dir_fails_with_the_first_ones_endpoint(
    seaweed: EmbeddedS3,
    tmp_path: Path,
    capsys: Any,
    credentials: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "s3"
    with EmbeddedS3(data_dir=data) as first:
        with pytest.raises(DataDirBusy, match=f"use it with --endpoint-url {first.endpoint_url}"):
            EmbeddedS3(data_dir=data).start()
        assert first.make_client().list_buckets()["Buckets"] == []  # the first one still serves
    # The S3 port of a running server: `dev --port` says so instead of using that server.
    port = seaweed.endpoint_url.rsplit(":", 1)[1]
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = main(["dev", "--handlers", HANDLERS, "--port", port])
    err = capsys.readouterr().err
    assert code == 1 and f"port {port} is in use" in err and err.count("\n") == 1, err
    with pytest.raises(PortBusy):
        EmbeddedS3(s3_port=int(port)).start()

"""Rough edges of the command line a first user met: ``stats`` beside idempotency records, the
per-partition table's dead letters, and the live progress line on a real terminal."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Iterator
from typing import Any

import pytest
from s3queue import PermanentError, Queue, run_local
from s3queue.dispatching.coordinator import Coordinator
from s3queue.local.cli import main
from s3queue.local.console import ProgressLine, fit
from s3queue.storage.s3 import S3Storage

STATE = {"pending": 12, "delayed": 3, "in_flight": 4, "processed": 1234, "dlq": 1}
SNAPSHOT = {q: dict(STATE) for q in ("generate_report", "send_email", "ship_order")}


@pytest.fixture
def cli(seaweed: Any, bucket: str, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "s3queue")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3queue-secret")
    for name in ("S3QUEUE_BUCKET", "S3QUEUE_ENDPOINT_URL", "S3QUEUE_PREFIX", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--endpoint-url", seaweed.endpoint_url, "--bucket", bucket, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.s3
def test_stats_skips_the_idempotency_records_folder(cli: Any, seaweed: Any, bucket: str) -> None:
    # GIVEN a queue, and idempotency records beside the queues (S3PersistenceLayer's folder)
    client = seaweed.make_client()
    Queue("send_email", bucket=bucket, s3=client).enqueue({"to": "a@example.com"})
    client.put_object(Bucket=bucket, Key="s3queue/_idempotency/send_email/fn#x", Body=b"{}")
    client.put_object(Bucket=bucket, Key="s3queue/zz_later/msg/x", Body=b"{}")
    # WHEN every queue's stats are asked for
    code, out, err = cli("stats")
    # THEN the records' folder is not a queue, and the queues after it are still listed
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["send_email", "zz_later"]


@pytest.mark.s3
def test_the_partition_table_counts_dead_letters(cli: Any, seaweed: Any, bucket: str) -> None:
    # GIVEN dead letters in two partitions and a pending message in a third
    client = seaweed.make_client()
    queue = Queue("jobs", bucket=bucket, s3=client)
    queue.enqueue("bad", partition="tenant-a")
    queue.enqueue("bad", partition="tenant-a")
    queue.enqueue("bad")

    def refuse(message: Any) -> None:
        raise PermanentError("no")

    run_local({"jobs": refuse}, bucket=bucket, s3=client, drain=True, workers=1)
    queue.enqueue("later", partition="tenant-b", delay=3600)
    # WHEN the per-partition table is printed
    code, out, err = cli("stats", "jobs", "--partitions")
    assert code == 0, err
    head, *rows = [line.split() for line in out.splitlines()]
    # THEN it has a dead column, a partition with only dead letters included
    assert head == ["queue", "partition", "pending", "delayed", "in_flight", "dead", "oldest_age_s"]
    by_partition = {row[1]: row[2:6] for row in rows}
    assert by_partition == {
        "(default)": ["0", "0", "0", "1"],
        "tenant-a": ["0", "0", "0", "2"],
        "tenant-b": ["0", "1", "0", "0"],
    }


@pytest.fixture
def terminal() -> Iterator[tuple[Any, int]]:
    """A pseudo-terminal: the progress line's stream, and the fd its screen is read from."""
    controller, screen = os.openpty()
    stream = os.fdopen(screen, "w")
    yield stream, controller
    stream.close()
    os.close(controller)


def resize(stream: Any, columns: int) -> None:
    fcntl.ioctl(stream.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


def drawn(controller: int) -> str:
    return os.read(controller, 65536).decode()


@pytest.mark.parametrize("columns", [40, 66, 120, 250])
def test_the_progress_line_fits_the_terminal_it_is_drawn_on(
    terminal: tuple[Any, int], columns: int
) -> None:
    # GIVEN a terminal of some width on stderr (stdout is a pipe here, as under pytest)
    stream, controller = terminal
    resize(stream, columns)
    # WHEN the progress of three queues is drawn
    ProgressLine(stream).update(SNAPSHOT)
    stream.flush()
    line = drawn(controller).removeprefix("\r").removesuffix("\x1b[K")
    # THEN the line fits in the terminal's width (not stdout's default 80), as detailed as fits
    assert len(line) < columns
    if columns == 250:
        assert "generate_report: 12 pending (+3 delayed), 4 in flight, 1234 done, 1 DLQ" in line
    if columns == 120:
        assert "send_email p12+3 f4 ok1234 x1" in line
    if columns == 66:
        assert "3 queues: 36 pending, 12 in flight, 3702 done, 3 DLQ" in line


def test_fit_cuts_only_what_nothing_shorter_describes() -> None:
    assert fit(SNAPSHOT, 20) == "3 queues: 36 pend..."


@pytest.mark.s3
def test_a_worker_with_no_dispatcher_says_so(cli: Any, tmp_path: Any) -> None:
    (tmp_path / "jobs.py").write_text("def handle(message):\n    return None\n")
    code, _, err = cli("worker", "--drain", "--handlers", str(tmp_path))
    assert code == 0, err
    assert "warning: no dispatcher: no coordinator led any queue" in err


@pytest.mark.s3
def test_stats_points_at_a_queue_no_coordinator_serves(cli: Any, seaweed: Any, bucket: str) -> None:
    # GIVEN a queue being served (a coordinator leads it) and a typo nobody serves
    client = seaweed.make_client()
    Queue("invoice", bucket=bucket, s3=client).enqueue({"n": 1})
    Queue("invoce", bucket=bucket, s3=client).enqueue({"n": 2})
    storage = S3Storage(client, bucket)
    Coordinator(storage, "invoice", invoker=lambda payload: None).tick()
    # WHEN the stats are printed
    code, out, err = cli("stats")
    # THEN both are listed, and the one nobody serves is pointed at
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["invoce", "invoice"]
    assert "warning: invoce has messages but no coordinator led it" in err
    assert "invoice has" not in err

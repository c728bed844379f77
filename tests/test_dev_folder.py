"""``s3queue dev``'s embedded server and its folder: where the data lands, a port that stays,
``s3queue env``, and a restart right after a ``kill -9``. Real processes, real SeaweedFS."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from s3queue.local.dev import DEV_DATA, adopt_nested_data
from s3queue.local.hosting import PORT_NAME, ports_free, preferred_port

pytestmark = pytest.mark.s3

REPO = Path(__file__).resolve().parents[1]
S3QUEUE = str(Path(sys.executable).parent / "s3queue")
HANDLER = "def handle(message):\n    return None\n"


def folder(tmp_path: Path) -> Path:
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "jobs.py").write_text(HANDLER)
    return tmp_path


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("S3QUEUE_", "AWS_"))}


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [S3QUEUE, *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def endpoint(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if x.startswith("Embedded S3 at ")]
    return line.split()[3].rstrip(",")


def test_dev_keeps_its_data_in_the_folder_and_its_port_from_run_to_run(tmp_path: Path) -> None:
    cwd = folder(tmp_path)
    # WHEN `s3queue dev --drain` runs twice in one folder
    first = run(cwd, "dev", "--drain", "--handlers", "handlers")
    second = run(cwd, "dev", "--drain", "--handlers", "handlers")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    # THEN the server's files are in .s3queue-dev/s3 itself, not nested below it
    data = cwd / DEV_DATA
    assert (data / "filerldb2").is_dir()
    assert not (data / ".s3queue-dev").exists()
    # AND both runs served the same endpoint, the one `s3queue env` prints for the folder
    assert endpoint(first.stderr) == endpoint(second.stderr)
    url = endpoint(first.stderr)
    assert url == f"http://127.0.0.1:{(data / PORT_NAME).read_text().strip()}"
    printed = run(cwd, "env")
    assert printed.returncode == 0, printed.stderr
    assert f"export S3QUEUE_ENDPOINT_URL={url}" in printed.stdout.splitlines()
    assert "export S3QUEUE_BUCKET=s3queue-dev" in printed.stdout.splitlines()
    assert "no s3queue dev serves this folder now" in printed.stderr


def test_dev_restarts_right_after_a_kill_9(tmp_path: Path) -> None:
    cwd = folder(tmp_path)
    # GIVEN a running `s3queue dev`, killed with SIGKILL (its server gets SIGTERM and stops)
    first = subprocess.Popen(
        [S3QUEUE, "dev", "--handlers", "handlers"],
        cwd=cwd,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stderr is not None
    seen = []
    for line in first.stderr:  # until it runs: a join on its output, not a sleep
        seen.append(line)
        if line.startswith("Running"):
            break
    first.send_signal(signal.SIGKILL)
    first.wait()
    # WHEN it is started again at once
    again = run(cwd, "dev", "--drain", "--handlers", "handlers")
    # THEN it waits for the old server to stop, and serves the same endpoint
    assert again.returncode == 0, again.stderr
    assert endpoint(again.stderr) == endpoint("".join(seen))


def test_data_of_the_nested_layout_moves_up(tmp_path: Path) -> None:
    # GIVEN the layout an earlier version left: the server's files one level too deep
    data = tmp_path / DEV_DATA
    nested = data / DEV_DATA
    (nested / "filerldb2").mkdir(parents=True)
    (nested / "s3queue-dev_1.dat").write_bytes(b"volume")
    (data / "s3queue.lock").write_text("1 http://127.0.0.1:1\n")
    # WHEN dev adopts it
    assert adopt_nested_data(data) == 2
    # THEN the files are where the server now looks, and the nested folder is gone
    assert (data / "s3queue-dev_1.dat").read_bytes() == b"volume"
    assert (data / "filerldb2").is_dir()
    assert not (data / ".s3queue-dev").exists()
    assert adopt_nested_data(data) == 0


def test_a_folder_with_data_of_its_own_keeps_it(tmp_path: Path) -> None:
    data = tmp_path / DEV_DATA
    (data / DEV_DATA / "filerldb2").mkdir(parents=True)
    (data / "filerldb2").mkdir()
    assert adopt_nested_data(data) == 0
    assert (data / DEV_DATA / "filerldb2").is_dir()


def test_the_port_is_the_folders_own(tmp_path: Path) -> None:
    one, two = tmp_path / "a", tmp_path / "b"
    one.mkdir()
    two.mkdir()
    assert preferred_port(one) == preferred_port(one)
    (two / PORT_NAME).write_text("23456\n")
    assert preferred_port(two) == 23456
    shutil.rmtree(two)


def test_a_held_port_is_waited_for_until_its_holder_lets_go() -> None:
    # GIVEN a port a stopping server's last thread still listens on
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    # THEN it is not free, waiting or not
    assert not ports_free((port,))
    assert not ports_free((port,), wait=0.2)
    # AND once the holder lets go it is, and a waiter sees it within its wait
    released = threading.Timer(0.2, holder.close)
    released.start()
    assert ports_free((port,), wait=30)
    released.join()

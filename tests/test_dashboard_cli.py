"""``s3queue dev --ui`` on SeaweedFS: the dashboard serves the queues while dev runs them."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from s3queue.local.seaweed import EmbeddedS3
from test_cli import Cli, credentials  # noqa: F401 - the fixture

pytestmark = pytest.mark.s3


@pytest.fixture
def cli(seaweed: EmbeddedS3, bucket: str, capsys: Any, credentials: None) -> Cli:  # noqa: F811
    return Cli(seaweed.endpoint_url, bucket, capsys)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_dev_ui_serves_the_dashboard_while_dev_runs(cli: Cli, tmp_path: Path) -> None:
    # GIVEN a handler that reads the dashboard's overview while its message runs
    port = free_port()
    folder = tmp_path / "handlers"
    folder.mkdir()
    page = tmp_path / "page.html"
    (folder / "jobs.py").write_text(
        "import urllib.request\n\n"
        "def handle(message):\n"
        f"    with urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=30) as answer:\n"
        f"        open({str(page)!r}, 'wb').write(answer.read())\n"
    )
    cli.ok("enqueue", "jobs", "look", "--handlers", str(folder))
    # WHEN dev runs with --ui
    code, _, err = cli("dev", "--handlers", str(folder), "--drain", "--ui", "--ui-port", str(port))
    # THEN it printed where, and the page listed the queue with its message in flight
    assert code == 0, err
    assert f"Dashboard at http://127.0.0.1:{port}/" in err
    html = page.read_text()
    assert 'data-queue="jobs"' in html and '<td class="n in-flight">1</td>' in html

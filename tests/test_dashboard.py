"""The dashboard over HTTP (Flask's test client, MemoryStorage, a fake clock): what each page
shows, each action, the CSRF and origin checks, the Host check, and that no secret shows."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from flask.testing import FlaskClient
from harness import QUEUE, Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.local.cli import build_parser
from s3queue.local.console import Connection
from s3queue.local.ui.app import create_app
from s3queue.local.ui.board import Board
from s3queue.local.ui.trend import WINDOW_MS, Trend
from s3queue.protocol.holds import Holds

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-ui-test"


@pytest.fixture
def h(monkeypatch: pytest.MonkeyPatch) -> Harness:
    """Queue ``jobs`` with two dead letters (bad-1, bad-2) and two waiting messages."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    harness = Harness(settings=QueueSettings(max_retries=0))
    for name in ("bad-1", "bad-2"):
        harness.queue.enqueue({"name": name}, id=name, attributes={"tenant": "acme"})
    harness.drain(Recorder(fail=lambda m: ValueError(f"cannot handle {m.body['name']}")))
    harness.queue.enqueue({"to": "ada@example.com"}, id="waiting", partition="tenant-7")
    harness.queue.enqueue("later", delay=600)
    return harness


@pytest.fixture
def client(h: Harness) -> FlaskClient:
    conn = Connection(None, h.storage, "my-bucket", "s3queue")  # type: ignore[arg-type]
    board = Board(conn, "http://user:pass@127.0.0.1:9000", clock=h.clock)
    return create_app(board).test_client()


def token(client: FlaskClient, path: str = f"/queues/{QUEUE}") -> str:
    """The CSRF token of the session, as a page's forms carry it."""
    page = client.get(path).get_data(as_text=True)
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_overview_shows_every_queue_and_its_counts(client: FlaskClient) -> None:
    page = client.get("/").get_data(as_text=True)
    row = re.search(r'<tr data-queue="jobs">(.*?)</tr>', page, re.S)
    assert row is not None
    cells = dict(re.findall(r'<td class="n (pending|delayed|in-flight|dead)[^"]*">(\d+)', row[1]))
    assert cells == {"pending": "1", "delayed": "1", "in-flight": "0", "dead": "2"}
    assert "bucket <b>my-bucket</b>" in page and "http://127.0.0.1:9000" in page
    assert client.get("/live/overview").get_data(as_text=True).count("<tr") == 1


def test_queue_page_shows_partitions_messages_and_dead_letters(client: FlaskClient) -> None:
    page = client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    assert "tenant-7" in page and "(default)" in page  # partitions
    assert "ada@example.com" in page and "&#34;later&#34;" in page  # bodies, escaped
    assert "ValueError: cannot handle bad-1" in page and 'data-id="bad-2"' in page
    live = client.get(f"/queues/{QUEUE}/live").get_data(as_text=True)
    assert "Partitions" in live and "tenant-7" in live


def test_a_dead_letter_page_has_its_body_attributes_and_tracebacks(client: FlaskClient) -> None:
    page = client.get(f"/queues/{QUEUE}/dead/bad-1").get_data(as_text=True)
    assert "&#34;name&#34;: &#34;bad-1&#34;" in page and "tenant" in page and "acme" in page
    assert "Traceback (most recent call last)" in page and "cannot handle bad-1" in page
    assert client.get(f"/queues/{QUEUE}/dead/nope").status_code == 404


def test_unknown_or_bad_names_are_404(client: FlaskClient) -> None:
    assert client.get("/queues/nosuch").status_code == 404
    assert client.get("/queues/..%2Fx").status_code == 404
    assert client.get(f"/queues/{QUEUE}/dead/a b").status_code == 404


def test_redrive_one_dead_letter(client: FlaskClient, h: Harness) -> None:
    answer = client.post(
        f"/queues/{QUEUE}/dead/redrive", data={"csrf": token(client), "id": "bad-1"}
    )
    assert answer.status_code == 303 and answer.headers["Location"].endswith(f"/queues/{QUEUE}")
    assert [d["id"] for d in h.queue.dead_letters()] == ["bad-2"]
    assert "Redrove dead letter bad-1" in client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    again = client.post(
        f"/queues/{QUEUE}/dead/redrive", data={"csrf": token(client), "id": "bad-1"}
    )
    assert again.status_code == 404


def test_redrive_all_and_delete_one(client: FlaskClient, h: Harness) -> None:
    csrf = token(client)
    client.post(f"/queues/{QUEUE}/dead/delete", data={"csrf": csrf, "id": "bad-2"})
    assert [d["id"] for d in h.queue.dead_letters()] == ["bad-1"]
    client.post(f"/queues/{QUEUE}/dead/redrive", data={"csrf": csrf})
    assert h.queue.dead_letters() == [] and h.queue.stats()["pending"] == 2


def test_delete_all_and_purge_need_the_name_typed(client: FlaskClient, h: Harness) -> None:
    csrf = token(client)
    assert "Type the queue" in client.get(f"/queues/{QUEUE}/purge").get_data(as_text=True)
    refused = client.post(f"/queues/{QUEUE}/purge", data={"csrf": csrf, "confirm": "job"})
    assert refused.status_code == 400 and h.queue.stats()["pending"] == 1
    assert client.post(f"/queues/{QUEUE}/dead/delete", data={"csrf": csrf}).status_code == 400
    assert len(h.queue.dead_letters()) == 2
    client.post(f"/queues/{QUEUE}/purge", data={"csrf": csrf, "confirm": QUEUE})
    stats = h.queue.stats()
    assert (stats["pending"], stats["delayed"], stats["dead"]) == (0, 0, 2)
    assert client.get(f"/queues/{QUEUE}/dead-letters/delete").status_code == 200
    client.post(f"/queues/{QUEUE}/dead/delete", data={"csrf": csrf, "confirm": QUEUE})
    assert h.queue.dead_letters() == []


def test_pause_and_resume_from_the_page(client: FlaskClient, h: Harness) -> None:
    assert 'class="pause"' in client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    answer = client.post(f"/queues/{QUEUE}/pause", data={"csrf": token(client)})
    assert answer.status_code == 303 and h.queue.paused()
    page = client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    assert "Paused jobs" in page and 'class="resume"' in page
    assert 'class="badge paused"' in client.get("/").get_data(as_text=True)
    # AND a cross-site pause is refused like any other action
    h.queue.resume()
    refused = client.post(
        f"/queues/{QUEUE}/pause", data={}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert refused.status_code == 403 and not h.queue.paused()
    client.post(f"/queues/{QUEUE}/pause", data={"csrf": token(client)})
    client.post(f"/queues/{QUEUE}/resume", data={"csrf": token(client)})
    assert not h.queue.paused()
    assert 'class="badge paused"' not in client.get("/").get_data(as_text=True)


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no token at all
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "https://evil.example"},
    ],
)
def test_cross_site_posts_are_refused(client: FlaskClient, h: Harness, headers: Any) -> None:
    data = {"id": "bad-1"} if not headers else {"id": "bad-1", "csrf": token(client)}
    answer = client.post(f"/queues/{QUEUE}/dead/redrive", data=data, headers=headers)
    assert answer.status_code == 403
    assert len(h.queue.dead_letters()) == 2


def test_a_token_of_another_session_is_refused(h: Harness, client: FlaskClient) -> None:
    stolen = token(client)
    conn = Connection(None, h.storage, "b", "s3queue")  # type: ignore[arg-type]
    other = create_app(Board(conn, None, clock=h.clock)).test_client()
    other.get("/")
    answer = other.post(f"/queues/{QUEUE}/purge", data={"csrf": stolen, "confirm": QUEUE})
    assert answer.status_code == 403 and h.queue.stats()["pending"] == 1


def test_same_origin_posts_pass(client: FlaskClient, h: Harness) -> None:
    headers = {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"}
    data = {"csrf": token(client), "id": "bad-1"}
    answer = client.post(f"/queues/{QUEUE}/dead/redrive", data=data, headers=headers)
    assert answer.status_code == 303


def test_other_host_names_are_refused(client: FlaskClient) -> None:
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400
    assert client.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8765"}).status_code == 200


def test_pages_carry_protective_headers(client: FlaskClient) -> None:
    headers = client.get(f"/queues/{QUEUE}").headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    cookie = headers.get("Set-Cookie", "")
    assert "SameSite=Strict" in cookie and "HttpOnly" in cookie


def test_no_page_shows_a_secret(client: FlaskClient) -> None:
    paths = ["/", "/live/overview", f"/queues/{QUEUE}", f"/queues/{QUEUE}/live"]
    paths += [f"/queues/{QUEUE}/dead/bad-1", f"/queues/{QUEUE}/purge", "/queues/nosuch"]
    for path in paths:
        page = client.get(path).get_data(as_text=True)
        assert SECRET not in page and "user:pass" not in page and "pass@" not in page, path


def test_the_default_address_is_loopback() -> None:
    args = build_parser().parse_args(["ui"])
    assert (args.host, args.ui_port) == ("127.0.0.1", 8765)
    dev = build_parser().parse_args(["dev", "--ui"])
    assert dev.ui and dev.host == "127.0.0.1"


def test_the_server_binds_loopback_only(h: Harness) -> None:
    from s3queue.local.ui.serve import Dashboard

    conn = Connection(None, h.storage, "b", "s3queue")  # type: ignore[arg-type]
    board = Dashboard(conn, None, "127.0.0.1", 0)
    try:
        host, port = board.server.socket.getsockname()[:2]
        assert host == "127.0.0.1" and port > 0 and board.url == f"http://127.0.0.1:{port}/"
    finally:
        board.close()


def test_the_rate_of_the_last_minutes() -> None:
    trend = Trend()
    assert trend.rate() is None
    trend.add(0, 100, 0)
    trend.add(60_000, 40, 3)
    rate = trend.rate()
    assert rate is not None and (rate.backlog, rate.dead) == (-60.0, 3.0)
    for minute in range(2, 12):
        trend.add(minute * 60_000, 40, 3)
    assert trend.samples[-1][0] - trend.samples[0][0] <= WINDOW_MS + 60_000
    later = trend.rate()
    assert later is not None and later.backlog == 0.0


def test_importing_the_local_tools_loads_no_web_stack() -> None:
    code = (
        "import sys, s3queue.local, s3queue.local.cli;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'waitress', 'jinja2')"
        " or m.startswith('s3queue.local.ui')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_taken_port_is_one_clear_error(h: Harness) -> None:
    from s3queue.local.console import UsageError
    from s3queue.local.ui.serve import Dashboard

    conn = Connection(None, h.storage, "b", "s3queue")  # type: ignore[arg-type]
    first = Dashboard(conn, None, "127.0.0.1", 0)
    try:
        port = first.server.effective_port
        with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{port}"):
            Dashboard(conn, None, "127.0.0.1", port)
    finally:
        first.close()


def test_s3_trouble_is_a_one_line_page(h: Harness) -> None:
    from s3queue.errors import EndpointUnreachable

    class Down:
        def list(self, *args: Any, **kwargs: Any) -> Any:
            raise EndpointUnreachable("no S3 server answered at http://127.0.0.1:1\nmore detail")

    conn = Connection(None, Down(), "b", "s3queue")  # type: ignore[arg-type]
    client = create_app(Board(conn, None, clock=h.clock)).test_client()
    answer = client.get("/")
    page = answer.get_data(as_text=True)
    assert answer.status_code == 502 and "no S3 server answered" in page
    assert "more detail" not in page and "Traceback" not in page


def test_queue_page_shows_what_the_limits_hold_back(client: FlaskClient, h: Harness) -> None:
    page = client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    assert "Held back by limits" not in page  # a queue without limits says nothing
    # GIVEN the leader of a limited queue reported what it held back (protocol/holds.py)
    held = {"partition_concurrency": 7, "rate_limit": 3}
    h.storage.put(h.queue.keys.holds, Holds(held, h.clock.now_ms()).encode("t"), token="t")
    page = client.get(f"/queues/{QUEUE}").get_data(as_text=True)
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert "Held back by limits at the leader's last tick: 3 by rate_limit , 7 by" in text
    assert "partition_concurrency" in text

"""The delaying proxy of the benchmarks (bench/delay.py) and the `hiding` scenario, on SeaweedFS.

The proxy must be transparent (every answer as the server gave it), count each request by its
billing kind, and hold each request for its kind's delay. The scenario is run at smoke sizes:
that it runs and reports, not how fast anything is.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from s3queue.local.seaweed import ANY_CREDENTIALS, EmbeddedS3
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench/

from bench import report
from bench.delay import NO_DELAY, DelayProxy, Delays, kind_of
from bench.plan import SMOKE
from bench.run import run_all
from bench.target import Target


def test_requests_are_classified_by_billing_kind() -> None:
    assert kind_of("GET", "/bucket?list-type=2&prefix=a%2F") == "LIST"
    assert kind_of("GET", "/bucket/key?list-type=2") == "GET"  # a key named so is an object
    assert kind_of("GET", "/bucket/a/b") == "GET"
    assert kind_of("POST", "/bucket?delete") == "POST"
    delays = Delays(put=0.03, get=0.02, list=0.05)
    assert delays.of("GET", "/bucket?list-type=2") == 0.05
    assert delays.of("HEAD", "/bucket/k") == 0.02
    assert delays.of("DELETE", "/bucket/k") == 0.03
    assert delays.of("POST", "/bucket?delete") == 0.03


@pytest.mark.s3
def test_the_proxy_forwards_counts_and_delays(seaweed: EmbeddedS3, bucket: str) -> None:
    # GIVEN a proxy holding each GET 0.2 s
    with DelayProxy(seaweed.endpoint_url, Delays(get=0.2)) as proxy:
        storage = S3Storage(make_client(proxy.url, credentials=ANY_CREDENTIALS), bucket)
        # WHEN the storage works through it
        etag = storage.put("a/1", b"one", if_none_match=True)
        assert [e.key for e in storage.list("a/").entries] == ["a/1"]
        assert storage.head("a/missing") is None
        started = time.monotonic()
        got = storage.get("a/1")
        held = time.monotonic() - started
        storage.delete_many(["a/1"])
        storage.delete("a/2")
        # THEN every answer is the server's, each request counted by kind, and the GET held
        assert got is not None and got.body == b"one" and got.etag == etag
        assert storage.get("a/1") is None
        assert held >= 0.2
        assert proxy.counts(reset=True) == {
            "PUT": 1,
            "LIST": 1,
            "HEAD": 1,
            "GET": 2,
            "POST": 1,
            "DELETE": 1,
        }
        assert proxy.counts() == {}


@pytest.mark.s3
def test_hiding_runs_and_reports(seaweed: EmbeddedS3, tmp_path: Path) -> None:
    # GIVEN the tiniest plan
    plan = replace(SMOKE, hiding_pool_messages=8)
    # WHEN the scenario runs and the report is written
    with Target(server=seaweed) as target:
        data = run_all(target, plan, ["hiding"])["hiding"]
    meta = {"date": "smoke", "command": "smoke", "target": "seaweed", "machine": "test"}
    results = {"meta": {**meta, "load_start": [0.0], "load_end": [0.0], "seconds": 0.0}}
    report.write(tmp_path, {**results, "scenarios": {"hiding": data}})
    # THEN every drain finished, through the proxy, and the figures are in the report
    assert "error" not in data, data.get("error")
    for kind, messages in (("single", plan.hiding_messages), ("packed", plan.hiding_packed)):
        runs = data["drains"][kind]["runs"]
        assert [r["delays"] for r in runs] == ["none", "aws"]
        assert all(r["messages"] == messages and r["requests"]["GET"] > 0 for r in runs)
        assert data["drains"][kind]["ratio"]["median"] > 0
    pool = data["processes"]["runs"]
    assert [(r["processes"], r["exit_codes"]) for r in pool] == [(1, [0]), (3, [0, 0, 0])]
    assert "Under AWS-like round trips" in (tmp_path / "results.md").read_text()


def test_no_delay_is_no_delay() -> None:
    assert NO_DELAY.of("GET", "/b?list-type=2") == NO_DELAY.of("PUT", "/b/k") == 0.0

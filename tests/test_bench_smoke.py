"""Smoke test of the benchmark code (bench/): tiny sizes on the session's SeaweedFS.

It checks that the scenarios run and that the report is written and reads the figures right,
not how fast anything is: no wall-clock assertions.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from s3queue.local.seaweed import EmbeddedS3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench/

from bench import coldstart, headline, report
from bench.measure import percentile, summarize_ms
from bench.plan import SMOKE
from bench.run import run_all
from bench.target import Target


@pytest.mark.s3
def test_scenarios_run_and_the_report_is_written(seaweed: EmbeddedS3, tmp_path: Path) -> None:
    # GIVEN the tiniest plan, one worker count, the scenarios that talk to S3
    plan = replace(SMOKE, workers=(2,))
    names = ["throughput", "cost", "idle", "scale", "fairness", "payload", "aws_sim", "flow"]
    # WHEN they run and the report is written
    with Target(server=seaweed) as target:
        scenarios = run_all(target, plan, names)
    meta = {
        "date": "smoke",
        "command": "smoke",
        "target": "seaweed",
        "machine": "test",
        "load_start": [0.0],
        "load_end": [0.0],
        "seconds": 0.0,
    }
    results = {"meta": meta, "scenarios": scenarios}
    files = report.write(tmp_path, results)
    # THEN nothing failed, every file is there, and the figures are the protocol's
    assert {name: data.get("error") for name, data in scenarios.items()} == dict.fromkeys(names)
    assert {f.name for f in files} >= {"results.json", "results.md", "cost.png", "scale.png"}
    assert json.loads((tmp_path / "results.json").read_text())["scenarios"].keys() == set(names)
    single = scenarios["cost"]["modes"][0]
    assert single["per_message_by_role"]["enqueue"] == 1.0  # one PUT per enqueue
    assert scenarios["idle"]["lambda_idle"]["per_invocation_per_queue"] == 1.0  # one LIST
    plain, paused = scenarios["flow"]["modes"][:2]  # flow control unused costs nothing more
    assert plain["requests"] == single["requests"] and plain["mode"] == "plain"
    assert (
        paused["requests_by_role"]["coordinator"]["GET"] - 1
        == (plain["requests_by_role"]["coordinator"]["GET"])
    )  # a pause and a resume: one GET of the switch, at the first tick
    assert scenarios["scale"]["flat"] is True
    assert scenarios["payload"]["worker"]["bytes_read"] == plan.payload_bytes
    assert "| producer |" in (tmp_path / "results.md").read_text()
    sim = scenarios["aws_sim"]  # virtual time: figures of the simulated AWS, not of this machine
    assert sim["single"]["msgs_per_s"] > 0
    assert sim["packed"]["msgs_per_s"] > sim["single"]["msgs_per_s"]
    assert sim["single"]["steady"]["per_message_by_role"]["producer"] == 1.0  # one PUT
    assert sim["single"]["steady"]["started"] == sim["single"]["steady"]["enqueued"]
    assert [p["queues"] for p in sim["single"]["curve"]] == [1, 2]
    assert [(v["mode"], v["settings"]) for v in sim["variants"]] == [
        ("single", "batch_size=20"),
        ("packed", "concurrency=4"),
    ]
    assert sim["after_idle"]["low_latency"]["latency_ms"]["count"] == SMOKE.aws_sim_idle_messages
    assert sim["overload"]["slowdowns_503_by_role"]["producer"] > 0  # above 3,500 writes/s
    group = sim["group_commit"]["runs"][0]  # concurrent single enqueues share objects
    assert group["messages_per_object"] > 1 and group["started"] == group["enqueued"]
    assert "aws_sim.png" in {f.name for f in files}
    scale = sim["scale"]  # issue 22's figures, each over the seeds
    assert [r["offered_per_s"] for r in scale["overload"]["rows"]] == [
        SMOKE.aws_sim_variant_offered,
        7_000,
    ]
    assert scale["shards"]["steady"]["unstarted"]["max"] == 0  # drained: every one started
    assert scale["shards"]["after_split"]["enqueue_failures"]["max"] == 0
    assert scale["half_capacity"]["p99_ms"]["median"] > 0
    verdicts = {row.what: row.met for row in headline.rows(results)}
    assert "AWS simulation: enqueue-to-start p99 at half capacity, defaults" in verdicts
    assert verdicts["Idle S3 requests per minute per queue, coordinator Lambda (1 run a minute)"]
    assert "## Headline" in (tmp_path / "results.md").read_text()


def test_percentiles() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert summarize_ms([10, 20, 30])["p50"] == 20


def test_import_tree_parsing() -> None:
    tree = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 | site",
            "import time:        50 |       9000 |   boto3",
            "import time:        40 |       4000 |     botocore",
            "import time:        30 |       1000 |   s3queue",
            "import time:        10 |      12000 | app",
        ]
    )
    top = coldstart.top_imports(tree, 5)
    assert top == [
        {"module": "boto3", "cumulative_ms": 9.0},
        {"module": "s3queue", "cumulative_ms": 1.0},
    ]


def test_layer_size_counts_only_shipped_files() -> None:
    size = coldstart.layer_size()
    assert size["files"] > 0
    assert 0 < size["zip_bytes"] < size["bytes"]

"""A scheduled queue at synth: the layer ships the cron parser; what Lambda cannot keep fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cdk_support import Synth, render, synth
from s3queue.contract.environment import QueueMap
from s3queue.errors import ConfigError
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = pytest.mark.cdk


def functions_with(tmp_path: Path, settings: str) -> Path:
    target = tmp_path / "functions"
    shutil.copytree(FUNCTIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "handlers" / "heartbeat.py").write_text(
        f"SETTINGS = {settings}\n\n\ndef handle(message):\n    return message.body\n"
    )
    return target


def test_the_layer_asset_ships_cronsim_with_its_licence(default: Synth) -> None:
    layer = default.stack.node.find_child("Layers").node.find_child("S3Queue")
    content = default.resources[default.logical_id(layer)]["Properties"]["Content"]
    asset = Path(default.stack.node.root.outdir) / f"asset.{Path(content['S3Key']).stem}"
    files = {p.relative_to(asset).as_posix() for p in asset.rglob("*") if p.is_file()}
    assert {"python/cronsim/__init__.py", "python/cronsim/cronsim.py"} <= files
    assert [f for f in files if f.startswith("python/cronsim-") and "LICENSE" in f]
    assert "python/s3queue/contract/schedule.py" in files
    assert not [f for f in files if "__pycache__" in f or f.startswith("python/s3queue/local")]


def test_a_schedule_reaches_the_coordinator(tmp_path: Path) -> None:
    built = synth(functions_dir=functions_with(tmp_path, '{"schedule": "*/5 * * * *"}'))
    variables = render(built.coordinator()["Environment"]["Variables"])
    queues = QueueMap.decode(variables["S3QUEUE_QUEUES"])
    assert queues.settings["heartbeat"].schedule == "*/5 * * * *"


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (
            '{"schedule": 10}',
            r"heartbeat\.py: schedule every 10 s: on Lambda the coordinator runs every 60 s",
        ),
        ('{"schedule": 90}', r"heartbeat\.py: schedule every 90 s: on Lambda"),
        ('{"schedule": "*/5 * * *"}', r"heartbeat\.py: schedule '\*/5 \* \* \*'"),
        (
            '{"schedule": 60, "schedule_catch_up": 700000}',
            r"heartbeat\.py: schedule_catch_up \(700000 s\) must be shorter",
        ),
    ],
)
def test_synth_refuses_what_lambda_cannot_keep(tmp_path: Path, settings: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        synth(functions_dir=functions_with(tmp_path, settings))


def test_an_interval_must_be_whole_periods_of_the_coordinators_rate(tmp_path: Path) -> None:
    functions = functions_with(tmp_path, '{"schedule": 600}')
    synth({"s3queue:schedule": "rate(5 minutes)"}, functions_dir=functions)  # two periods
    functions = functions_with(tmp_path / "b", '{"schedule": 120}')
    with pytest.raises(ConfigError, match="coordinator runs every 300 s"):
        synth({"s3queue:schedule": "rate(5 minutes)"}, functions_dir=functions)

"""Dropping a handler module into ``functions/handlers/`` adds a queue: worker, grants, alarms."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cdk_support import Synth, render, synth
from s3queue.contract.environment import QueueMap
from s3queue.errors import ConfigError
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = pytest.mark.cdk

NEW_HANDLER = """
SETTINGS = {"visibility_timeout": 300, "timeout": 600, "memory": 1024, "concurrency": 3}


def handle(message):
    return message.body
"""


def copy_functions(tmp_path: Path) -> Path:
    target = tmp_path / "functions"
    shutil.copytree(FUNCTIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    functions = copy_functions(tmp_path_factory.mktemp("extended"))
    (functions / "handlers" / "resize_image.py").write_text(NEW_HANDLER)
    (functions / "handlers" / "_shared.py").write_text("LIMIT = 3\n")
    return synth(functions_dir=functions)


def test_a_new_module_adds_one_worker(default: Synth, extended: Synth) -> None:
    assert len(extended.workers()) == len(default.workers()) + 1
    assert set(extended.workers()) - set(default.workers()) == {"resize_image"}
    worker = extended.workers()["resize_image"]
    assert (worker["MemorySize"], worker["Timeout"]) == (1024, 600)
    assert worker["ReservedConcurrentExecutions"] == 3


def test_the_new_queue_is_wired_everywhere(extended: Synth) -> None:
    coordinator_env = render(extended.coordinator()["Environment"]["Variables"])
    queues = QueueMap.decode(coordinator_env["S3QUEUE_QUEUES"])
    assert queues.functions["resize_image"] == "S3Queue_resize_image"
    assert queues.settings["resize_image"].visibility_timeout == 300
    bucket_id = extended.logical_id(extended.stack.storage.bucket)
    rules = extended.resources[bucket_id]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"resize_image-ids", "resize_image-dlq"} <= {r["Id"] for r in rules}
    alarms = [
        a["Properties"]["AlarmName"] for a in extended.of_type("AWS::CloudWatch::Alarm").values()
    ]
    assert "S3Queue-resize_image-dead-letters" in alarms


def test_the_worker_asset_ships_the_handlers_but_not_the_coordinator(extended: Synth) -> None:
    asset = extended.workers()["resize_image"]["Code"]["S3Key"].removesuffix(".zip")
    staged = Path(extended.stack.node.root.outdir) / f"asset.{asset}"  # type: ignore[attr-defined]
    assert staged.is_dir()
    assert (staged / "handlers" / "resize_image.py").is_file()
    assert not (staged / "coordinator").exists()
    assert not list(staged.rglob("*.md"))


def test_a_queue_may_be_named_like_a_component(tmp_path: Path) -> None:
    functions = copy_functions(tmp_path)
    (functions / "handlers" / "coordinator.py").write_text(NEW_HANDLER)
    alarms = synth(functions_dir=functions).of_type("AWS::CloudWatch::Alarm").values()
    names = {alarm["Properties"]["AlarmName"] for alarm in alarms}
    assert {"S3Queue-coordinator-worker", "S3Queue-coordinator-errors"} <= names


def test_a_module_with_bad_settings_fails_the_synth_naming_the_file(tmp_path: Path) -> None:
    functions = copy_functions(tmp_path)
    bad = functions / "handlers" / "broken.py"
    bad.write_text('SETTINGS = {"visibilty_timeout": 10}\n\ndef handle(message): ...\n')
    with pytest.raises(ConfigError, match=r"broken\.py.*visibilty_timeout"):
        synth(functions_dir=functions)


def test_no_handler_module_is_an_error(tmp_path: Path) -> None:
    functions = copy_functions(tmp_path)
    for module in (functions / "handlers").glob("*.py"):
        module.unlink()
    with pytest.raises(ConfigError, match="no handler modules"):
        synth(functions_dir=functions)

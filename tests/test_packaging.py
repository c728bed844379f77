"""The Lambda layer ships only what Lambda runs: the functions never import `s3queue.local`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from s3queue.contract.packaging import LAYER_EXCLUDES, shipped

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench/

from bench import coldstart

ENTRY_POINTS = [("worker", "worker.app"), ("coordinator", "app")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("python/s3queue/working/worker.py", True),
        ("python/s3queue/storage/s3.py", True),
        ("python/s3queue/local", False),
        ("python/s3queue/local/cli.py", False),
        ("python/s3queue/__pycache__/worker.cpython-311.pyc", False),
        ("python/s3queue/storage/__pycache__", False),
        ("python/s3queue.egg-info/PKG-INFO", False),
        ("python/s3queue/localise.py", True),
    ],
)
def test_shipped_follows_the_exclusion_list(path: str, expected: bool) -> None:
    assert shipped(path) is expected


def test_exclusion_list_leaves_out_the_local_tools() -> None:
    assert "python/s3queue/local" in LAYER_EXCLUDES


@pytest.mark.parametrize(("root", "module"), ENTRY_POINTS)
def test_function_imports_no_local_module(tmp_path: Path, root: str, module: str) -> None:
    # GIVEN the layer copied as the asset ships it (no s3queue/local/ at all) and the functions
    copy = coldstart._copy_code(tmp_path)
    assert not (copy / "python" / "s3queue" / "local").exists()
    assert (copy / "python" / "s3queue" / "working" / "worker.py").is_file()
    # WHEN the function's app module is imported in a fresh interpreter, as Lambda does
    code = (
        f"import json, sys, {module}, s3queue; "
        "print(json.dumps([s3queue.__file__, sorted(m for m in sys.modules "
        "if m.startswith('s3queue.local'))]))"
    )
    code_root = copy / "functions" / ("." if root == "worker" else root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code_root), str(copy / "python")])}
    env["POWERTOOLS_SERVICE_NAME"] = "s3queue"
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # THEN it imports, from the copy, and loads no s3queue.local module
    assert done.returncode == 0, done.stderr
    origin, local_modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(origin).is_relative_to(copy)
    assert local_modules == []


def test_layer_size_leaves_out_the_local_tools() -> None:
    size = coldstart.layer_size()
    local = [p for p in coldstart.LAYER.rglob("*.py") if "local" in p.parts]
    everything = [p for p in coldstart.LAYER.rglob("*.py") if "__pycache__" not in p.parts]
    assert local, "the local tools exist in the repository"
    assert size["files"] <= len(everything) - len(local) + 1  # + py.typed

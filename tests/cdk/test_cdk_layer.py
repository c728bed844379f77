"""The synthesized s3queue layer asset holds what Lambda runs, and not the local tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from cdk_support import Synth

pytestmark = pytest.mark.cdk


def test_layer_asset_ships_the_core_without_local_tools(default: Synth) -> None:
    # GIVEN the stack `make synth` builds
    layer = default.stack.node.find_child("Layers").node.find_child("S3Queue")
    content = default.resources[default.logical_id(layer)]["Properties"]["Content"]
    asset = Path(default.stack.node.root.outdir) / f"asset.{Path(content['S3Key']).stem}"
    # WHEN we read the files of the asset the layer points at
    files = {p.relative_to(asset).as_posix() for p in asset.rglob("*") if p.is_file()}
    # THEN the core is there, and nothing of s3queue/local/ nor any bytecode
    assert {"python/s3queue/__init__.py", "python/s3queue/working/worker.py"} <= files
    assert "python/s3queue/storage/s3.py" in files
    assert not [f for f in files if f.startswith("python/s3queue/local")]
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]

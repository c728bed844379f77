"""What the Lambda layer ships: one exclusion list for the CDK asset and the cold-start bench.

Paths are relative to the layer asset's root, ``layers/s3queue``, which holds ``python/s3queue/``
as Lambda expects. The local tools (``s3queue/local/``: the CLI, the local runtime, the
embedded S3 server) never run on Lambda, so they stay out, with bytecode and build metadata.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The ``s3queue`` package this module belongs to: what a layer is made of outside a checkout."""
LOCAL_TOOLS = "local"
"""The subpackage of ``s3queue`` that never ships in the layer."""
LAYER_EXCLUDES = ("**/__pycache__", "**/*.pyc", "**/*.egg-info", f"python/s3queue/{LOCAL_TOOLS}")
"""Glob patterns in the CDK asset's syntax (`IgnoreMode.GLOB`); a directory takes its files."""
LAYER_DEPENDENCIES = ("cronsim",)
"""Distributions the layer bundles beside ``s3queue`` (pure Python; boto3 comes with the
runtime): copied at synth from the environment that synthesizes (cdk/s3queue_cdk/layers.py)."""


def shipped(relative: str | PurePosixPath) -> bool:
    """Whether the file or folder at `relative` (to the asset root) goes into the layer."""
    path = PurePosixPath(relative)
    for current in (path, *path.parents):
        if current.name and any(_matches(current, pattern) for pattern in LAYER_EXCLUDES):
            return False
    return True


def _matches(path: PurePosixPath, pattern: str) -> bool:
    """``**/NAME`` matches a last segment anywhere; any other pattern the whole path."""
    if pattern.startswith("**/"):
        return fnmatchcase(path.name, pattern[3:])
    return fnmatchcase(path.as_posix(), pattern)

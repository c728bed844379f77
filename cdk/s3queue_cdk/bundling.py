"""Code assets assembled on this machine (CDK local bundling, never Docker).

The worker asset is ``worker/`` (the entry point), ``handlers/`` (the user's handler folder)
and the packages of the handlers' ``requirements.txt`` installed for Lambda
(`s3queue_cdk.dependencies`), side by side at the task root. Its hash is computed from those
sources and the platform, so an edit to any handler, the entry point or the requirements
makes a new asset, and an unchanged one is not bundled again.

Outside a checkout of this repository (``pip install s3queue[cdk]``), the layer is bundled
the same way from the installed ``s3queue`` package.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from s3queue_cdk.dependencies import Platform, installed, requirements_of

SKIPPED = ("__pycache__", "*.pyc", "*.md", "*.egg-info", ".*")
"""Never copied into an asset: bytecode, docs, build metadata, hidden files."""
BYTECODE = shutil.ignore_patterns("__pycache__", "*.pyc")
UNUSED_IMAGE = DockerImage.from_registry("unused-local-bundling-only")
"""CDK asks for an image; local bundling always succeeds or raises, so none is pulled."""


def skipped(name: str, extra: Iterable[str] = ()) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in (*SKIPPED, *extra))


def copy_tree(source: Path, target: Path, extra: Iterable[str] = ()) -> None:
    """`source` into `target` (created), minus `SKIPPED` and `extra` names at any depth."""
    patterns = tuple(extra)
    shutil.copytree(
        source,
        target,
        ignore=lambda _, names: [n for n in names if skipped(n, patterns)],
        dirs_exist_ok=True,
    )


def tree_digest(hasher: Any, root: Path, extra: Iterable[str] = ()) -> None:
    """Feed `hasher` the relative path and bytes of every file `copy_tree` would copy."""
    patterns = tuple(extra)
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not any(skipped(part, patterns) for part in relative.parts):
            hasher.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")


@jsii.implements(ILocalBundling)
class LocalAssembly:
    """Runs `steps` into CDK's output folder; each step is ``step(output_dir)``."""

    def __init__(self, steps: list[Callable[[Path], None]]) -> None:
        self._steps = steps

    def try_bundle(self, output_dir: str, _options: Any) -> bool:
        for step in self._steps:
            step(Path(output_dir))
        return True


def assembled_code(source: Path, digest: str, steps: list[Callable[[Path], None]]) -> lambda_.Code:
    """A code asset made by `steps`, identified by `digest` (the hash of all it is made of)."""
    return lambda_.Code.from_asset(
        str(source),
        asset_hash=digest,
        asset_hash_type=AssetHashType.CUSTOM,
        bundling=BundlingOptions(image=UNUSED_IMAGE, local=LocalAssembly(steps)),
    )


def worker_code(*, entry_dir: Path, handlers_dir: Path, platform: Platform) -> lambda_.Code:
    """``worker/`` from `entry_dir`, ``handlers/`` from `handlers_dir`, and their packages."""
    requirements = requirements_of(handlers_dir)
    # Installed now, not while CDK bundles: a pip failure is then a ConfigError of this synth.
    packages_dir = installed(requirements, platform) if requirements is not None else None
    hasher = hashlib.sha256(f"{platform}".encode())
    tree_digest(hasher, entry_dir)
    tree_digest(hasher, handlers_dir)

    def entry(out: Path) -> None:
        copy_tree(entry_dir, out / "worker")

    def handlers(out: Path) -> None:
        copy_tree(handlers_dir, out / "handlers")

    def packages(out: Path) -> None:
        if packages_dir is not None:  # as pip left them: a package's data files are its own
            shutil.copytree(packages_dir, out, dirs_exist_ok=True, ignore=BYTECODE)

    return assembled_code(handlers_dir, hasher.hexdigest(), [entry, handlers, packages])

"""Cold start: import time of the Lambda entry points, and the size of the s3queue layer.

Each function is imported in a fresh interpreter as Lambda imports it: its code root and the
layer's ``python/`` first on ``sys.path`` (``PYTHONPATH``), boto3 and Powertools from the
environment (on Lambda: the runtime and the public Powertools layer). Two variants:

- ``as deployed``: the layer and function code copied without ``__pycache__`` (the CDK assets
  exclude it) and run with ``PYTHONDONTWRITEBYTECODE``, so our own modules are compiled at every
  start, as on Lambda; boto3 and Powertools keep their bytecode;
- ``with bytecode``: the same copy, compiled beforehand.

The ``worker+<queue>`` entries add the handler module the worker's first invocation imports
(pydantic, for a handler with a typed body, comes with the public Powertools layer on Lambda).
Time is measured inside the child around the import statement (interpreter start-up excluded),
median of ``import_runs``; ``-X importtime`` gives the biggest contributors.
"""

from __future__ import annotations

import compileall
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from s3queue.contract.packaging import shipped

from bench.plan import Plan
from bench.progress import Progress
from bench.target import Target

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "layers" / "s3queue"
"""The layer asset's root, as the CDK stack packs it (`packaging.LAYER_EXCLUDES`)."""
LAYER = ASSET / "python"
FUNCTIONS = ROOT / "functions"
ENTRY_POINTS = {
    # name: (code root relative to functions/, modules Lambda imports)
    "worker": (".", "worker.app"),
    "coordinator": ("coordinator", "app"),
    # A worker's first invocation also imports its handler module: an untyped one, and
    # ship_order, whose body model brings pydantic (typed messages, s3queue.working.typed).
    "worker+generate_report": (".", "worker.app, handlers.generate_report"),
    "worker+ship_order": (".", "worker.app, handlers.ship_order"),
}
TOP = 8


def run(_target: Target, plan: Plan, progress: Progress) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="s3queue-coldstart-") as tmp:
        copy = _copy_code(Path(tmp))
        steps = [(name, variant) for name in ENTRY_POINTS for variant in ("deployed", "bytecode")]
        for n, (name, variant) in enumerate(steps):
            progress.update(n / len(steps), f"import {name} ({variant})")
            if variant == "bytecode":
                compileall.compile_dir(copy, quiet=1)
            root, module = ENTRY_POINTS[name]
            paths = [copy / "functions" / root, copy / "python"]
            results.setdefault(name, {})[variant] = import_time(module, paths, plan.import_runs)
            if variant == "bytecode":
                _remove_bytecode(copy)
    return {
        "params": {
            "runs": plan.import_runs,
            "python": sys.version.split()[0],
            "note": "Lambda runs Python 3.12 on arm64; this machine's interpreter is used here",
        },
        "imports": results,
        "layer": layer_size(),
    }


def import_time(module: str, paths: list[Path], runs: int) -> dict[str, Any]:
    """Median import time (ms) of `module` in fresh interpreters, and its top contributors."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["POWERTOOLS_SERVICE_NAME"] = "s3queue"
    code = (
        f"import time; t = time.perf_counter(); import {module}; "
        "print(round((time.perf_counter() - t) * 1000, 1))"
    )
    times, tree = [], ""
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        times.append(float(done.stdout.strip().splitlines()[-1]))
        tree = done.stderr
    return {
        "median_ms": round(statistics.median(times), 1),
        "runs_ms": times,
        "top": top_imports(tree, TOP),
    }


def top_imports(importtime: str, count: int) -> list[dict[str, Any]]:
    """The biggest direct imports of the measured statement, by cumulative time (ms)."""
    rows = []
    for line in importtime.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, name.strip(), int(parts[1]) / 1000))
    # Direct imports of the statement are the depth-1 entries; startup (site, encodings) and
    # the module itself are depth 0.
    direct = [(n, ms) for depth, n, ms in rows if depth == 1]
    direct.sort(key=lambda row: -row[1])
    return [{"module": n, "cumulative_ms": round(ms, 1)} for n, ms in direct[:count]]


def layer_size() -> dict[str, Any]:
    """Files, bytes and zipped bytes of the layer as the CDK asset ships it (no ``local/``)."""
    buffer = io.BytesIO()
    files = raw = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(LAYER.rglob("*")):
            if path.is_file() and shipped(path.relative_to(ASSET)):
                archive.write(path, Path("python") / path.relative_to(LAYER))
                files += 1
                raw += path.stat().st_size
    return {"files": files, "bytes": raw, "zip_bytes": len(buffer.getvalue())}


def _layer_ignore(folder: str, names: list[str]) -> set[str]:
    """What `shutil.copytree` leaves out of the layer: what the CDK asset leaves out."""
    base = Path(folder).relative_to(ASSET)
    return {name for name in names if not shipped(base / name)}


def _copy_code(tmp: Path) -> Path:
    shutil.copytree(LAYER, tmp / "python", ignore=_layer_ignore)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(FUNCTIONS, tmp / "functions", ignore=ignore)
    return tmp


def _remove_bytecode(root: Path) -> None:
    for cache in list(root.rglob("__pycache__")):
        shutil.rmtree(cache)

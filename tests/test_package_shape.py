"""The package's shape: folders by role, no import cycles, a pinned public surface."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from importlib import import_module
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "layers" / "s3queue" / "python" / "s3queue"
SHIMS = {"s3queue.config", "s3queue.producer"}
"""Old import paths the docs once named, kept for one release; nothing in the tree imports them."""


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def top_level_imports(path: Path, known: set[str]) -> set[str]:
    """The core modules `path` imports when it is imported (not under TYPE_CHECKING, not in a
    function): the edges an import cycle is made of."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                break
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                found.add(sub.module)
                found |= {f"{sub.module}.{a.name}" for a in sub.names}
            elif isinstance(sub, ast.Import):
                found |= {a.name for a in sub.names}
    return {m for m in found if m in known}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:  # noqa: C901 - Tarjan, whole
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = core_modules()
    known = set(modules)
    # A package's __init__ is imported with each of its modules: that edge is not a cycle.
    return {
        name: {m for m in top_level_imports(path, known) if not name.startswith(m + ".")}
        for name, path in modules.items()
    }


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


SPLIT_BY_JOB = {
    "s3queue.working.worker": {
        "s3queue.working.walk",
        "s3queue.working.readahead",
        "s3queue.working.load",
        "s3queue.working.claim",
    },
    "s3queue.dispatching.coordinator": {
        "s3queue.dispatching.folders",
        "s3queue.dispatching.planning",
        "s3queue.dispatching.publishing",
        "s3queue.dispatching.view",
    },
}
"""Modules split out of the worker's and the coordinator's by job: the flow imports each part;
no part imports the flow back (the cycle test below)."""

MAX_MODULE_LINES = 350


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "s3queue.working.worker" in graph
    assert cycles(graph) == []


@pytest.mark.parametrize("flow", sorted(SPLIT_BY_JOB))
def test_a_flow_imports_the_parts_split_out_of_it(flow: str) -> None:
    graph = import_graph()
    assert SPLIT_BY_JOB[flow] <= graph[flow]
    assert not [part for part in SPLIT_BY_JOB[flow] if flow in graph[part]]


def test_no_core_module_is_over_the_line_limit() -> None:
    long = {
        name: n
        for name, path in core_modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def bench_graph() -> dict[str, set[str]]:
    """bench/'s modules and every bench module each imports, at the top or in a function: a
    deferred import only hides a cycle (it was how bench's two were kept)."""
    modules = {p.stem for p in (REPO / "bench").glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        found: set[str] = set()
        for node in ast.walk(ast.parse((REPO / "bench" / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "bench":
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench."):
                found.add((node.module or "").split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")}
        graph[name] = found & modules - {name}
    return graph


def test_bench_has_no_import_cycle_not_even_a_deferred_one() -> None:
    graph = bench_graph()
    assert "simreport" in graph["headline"]  # deferred imports are seen
    assert cycles(graph) == []


def test_every_core_module_lives_in_a_folder_by_role() -> None:
    top = {p.stem for p in CORE.glob("*.py")}
    public_face = {"__init__", "errors", "message", "idempotency"}
    assert top == public_face | {m.split(".")[1] for m in SHIMS}
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == {
        "contract",
        "protocol",
        "producing",
        "dispatching",
        "working",
        "operations",
        "storage",
        "common",
        "local",
    }


def test_nothing_in_the_tree_imports_an_old_path() -> None:
    users = []
    for root in ("layers", "functions", "cdk", "bench", "tests"):
        for path in (REPO / root).rglob("*.py"):
            if module_name(path) in SHIMS if path.is_relative_to(CORE) else False:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                users += [f"{path}: {n}" for n in names if n in SHIMS]
    assert users == []


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("s3queue.config", "ENV_BUCKET", "s3queue.contract.environment"),
        ("s3queue.config", "QueueSettings", "s3queue.contract.settings"),
        ("s3queue.config", "CoordinatorSettings", "s3queue.contract.settings"),
        ("s3queue.config", "discover_handlers", "s3queue.contract.discovery"),
        ("s3queue.producer", "MAX_DELAY", "s3queue.producing.arguments"),
        ("s3queue.producer", "Queue", "s3queue.producing.producer"),
    ],
)
def test_an_old_documented_path_still_works_and_says_where_it_moved(
    old: str, name: str, new: str
) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = import_module(old)
    assert getattr(module, name) is getattr(import_module(new), name)
    assert any(
        (issubclass(w.category, DeprecationWarning) and "s3queue.contract" in str(w.message))
        or "s3queue.producing" in str(w.message)
        for w in caught
    )


PUBLIC = {
    "s3queue": [
        "AccessDenied",
        "AlreadyDispatched",
        "BucketNotFound",
        "ConfigError",
        "Conflict",
        "CoordinatorSettings",
        "EndpointUnreachable",
        "EnqueueIncomplete",
        "HandlerExit",
        "HandlerTimeout",
        "InvalidArgument",
        "InvalidBody",
        "InvalidName",
        "InvokeFailed",
        "Item",
        "LeaseLost",
        "MalformedMessage",
        "Message",
        "MessageNotFound",
        "PayloadMissing",
        "PermanentError",
        "Queue",
        "QueueNotFound",
        "QueueSettings",
        "S3QueueError",
        "StorageError",
        "Throttled",
        "run_local",
    ],
    "s3queue.idempotency": ["S3PersistenceLayer", "records_root"],
    "s3queue.local": ["RunSummary", "run_local"],
    "s3queue.storage": ["Entry", "Head", "MemoryStorage", "Object", "Page", "Storage", "new_token"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_public_surface_is_pinned(module: str) -> None:
    """What users import (the README and docs/usage.md): moving internals never changes it."""
    imported = import_module(module)
    exported = sorted(getattr(imported, "__all__", []))
    assert exported == PUBLIC[module]
    for name in exported:
        assert getattr(imported, name) is not None


def test_the_contract_modules_load_no_queue_logic() -> None:
    """The CDK app and a cold start import only what they use: not the producer, the operator's
    calls, storage or boto3."""
    code = (
        "import sys, s3queue.contract.settings, s3queue.contract.environment, "
        "s3queue.contract.discovery, s3queue.contract.names, s3queue.contract.metric_names;"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('s3queue', 'boto')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "s3queue.contract.settings" in out
    heavy = [
        m
        for m in out
        if m.startswith(
            (
                "s3queue.producing",
                "s3queue.operations",
                "s3queue.storage",
                "s3queue.working",
                "s3queue.dispatching",
                "boto",
            )
        )
    ]
    assert heavy == []


BOTO_MODULES = {
    "s3queue.storage.transfers",
    "s3queue.storage.retry",
    "s3queue.storage.clients",
    "s3queue.storage.lean",
    "s3queue.storage.parsing",
    "s3queue.storage.listing",
    "s3queue.storage.transport",
    "s3queue.storage.wire",
}
"""boto3's transfer manager (large objects), the retry loop that translates botocore's errors,
the client factories, the lean path of the hot calls (botocore's credentials, HTTP session
and retry policy), the lean response parser, the lean LIST's reader (a cut answer raised
as botocore's error) and the lean path's HTTP exchange (botocore's errors, its session's
settings); `S3Storage` (storage/s3.py) only calls the client it is given."""


def test_boto3_is_imported_by_these_storage_modules_only() -> None:
    importers = set()
    for name, path in core_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n.split(".")[0] in {"boto3", "botocore"} for n in names):
                importers.add(name)
    assert importers == BOTO_MODULES


def test_the_event_catalogue_is_exactly_the_kinds_the_core_emits() -> None:
    from s3queue.common.events import KINDS

    emitted = set()
    for path in core_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "emit"
                and node.args
            ):
                first = node.args[0]
                assert isinstance(first, ast.Constant), f"{path}:{node.lineno}: a named kind"
                emitted.add(first.value)
    assert emitted == KINDS


def test_every_subpackage_is_in_the_distribution() -> None:
    # pyproject.toml lists the packages (three source folders make one wheel): a new folder of
    # the core must be listed there too, or the wheel ships without it.
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {module_name(p) for p in CORE.rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
    assert {"s3queue_cdk", "s3queue_cdk.entrypoints.worker"} <= listed

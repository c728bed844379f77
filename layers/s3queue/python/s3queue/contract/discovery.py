"""Handler discovery: each module of the handlers folder is a queue, its settings read with `ast`.

Handler modules are read, never imported, so the stack and the local runtime learn the queues
and their settings without running user code.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3queue.contract.names import QUEUE_NAME
from s3queue.contract.settings import QueueSettings
from s3queue.errors import ConfigError

SETTINGS_NAME = "SETTINGS"
HANDLER_NAME = "handle"


@dataclass(frozen=True)
class HandlerSpec:
    """A handler module: its queue, its file and its validated settings."""

    queue: str
    path: Path
    settings: QueueSettings


def discover_handlers(directory: str | os.PathLike[str]) -> dict[str, HandlerSpec]:
    """Every ``*.py`` file of `directory` not starting with ``_``, by queue name in sorted order."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"handler directory {root} does not exist")
    specs: dict[str, HandlerSpec] = {}
    for path in sorted(root.glob("*.py")):
        if not path.name.startswith("_"):
            spec = read_handler(path)
            specs[spec.queue] = spec
    return specs


def read_handler(path: Path) -> HandlerSpec:
    """The spec of one module; any problem is a `ConfigError` that names the file."""
    queue = path.stem
    if not QUEUE_NAME.match(queue):
        raise ConfigError(
            f"{path}: {queue!r} is not a valid queue name: use 1-64 of [a-z0-9_-], "
            "starting with a letter or digit"
        )
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}: not valid Python: {exc.msg} (line {exc.lineno})") from exc
    if not _binds(tree, HANDLER_NAME):
        raise ConfigError(f"{path}: defines no module-level `{HANDLER_NAME}(message)` function")
    try:
        settings = QueueSettings.from_mapping(_settings_literal(tree))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return HandlerSpec(queue=queue, path=path, settings=settings)


def _settings_literal(tree: ast.Module) -> dict[str, Any]:
    """The value of the last module-level ``SETTINGS = {...}``; empty when there is none."""
    assigned = [value for s in tree.body if (value := _assigned(s, SETTINGS_NAME)) is not None]
    if not assigned:
        return {}
    node = assigned[-1]
    if not isinstance(node, ast.Dict):
        raise ConfigError(f"{SETTINGS_NAME} must be a dict literal, got {ast.unparse(node)!r}")
    try:
        values = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError) as exc:
        raise ConfigError(
            f"{SETTINGS_NAME} must be a literal dict of constants (no names or calls): {exc}"
        ) from exc
    bad_keys = [key for key in values if not isinstance(key, str)]
    if bad_keys:
        raise ConfigError(f"{SETTINGS_NAME} keys must be strings, got {bad_keys!r}")
    return dict(values)


def _assigned(statement: ast.stmt, name: str) -> ast.expr | None:
    """The value `statement` assigns to `name`, if it is such an assignment."""
    if isinstance(statement, ast.Assign) and any(_is_name(t, name) for t in statement.targets):
        return statement.value
    if isinstance(statement, ast.AnnAssign) and _is_name(statement.target, name):
        return statement.value
    return None


def _binds(tree: ast.Module, name: str) -> bool:
    """Whether the module binds `name` at top level (def, assignment or import)."""
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            if statement.name == name:
                return True
        elif isinstance(statement, ast.Assign):
            if any(_is_name(target, name) for target in statement.targets):
                return True
        elif isinstance(statement, ast.Import | ast.ImportFrom) and any(
            (alias.asname or alias.name) == name for alias in statement.names
        ):
            return True
    return False


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name

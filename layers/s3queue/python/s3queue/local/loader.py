"""Loading handlers for the local runtime: a folder of handler modules, or a dict of callables.

A folder is read with `discover_handlers` (queue names and ``SETTINGS``), then each module is
imported from its file as ``handlers.<queue>``, the name the worker Lambda imports it by
(whatever the folder's own name: the deployed asset calls it ``handlers/``), so names derived
from the module (the module part of Powertools Idempotency keys) agree, and a handler
importing ``handlers._shared`` works in both. The folder's parent also goes on ``sys.path``
(appended) as ``/var/task`` is on Lambda. Folders loaded into one process (tests do that) share
the package, as a namespace package would; a module whose name another folder's module holds
already gets a private name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3queue.contract.discovery import HANDLER_NAME, discover_handlers
from s3queue.contract.settings import QueueSettings
from s3queue.errors import ConfigError
from s3queue.protocol.keys import check_queue_name
from s3queue.working.typed import bind
from s3queue.working.worker import Handler

HANDLERS_PACKAGE = "handlers"
"""The package the worker Lambda imports handler modules from (``functions/worker/app.py``)."""
LOADED_MARK = "__s3queue_loaded_from__"
Handlers = str | os.PathLike[str] | Mapping[str, Handler]
"""A folder of handler modules, or ``{queue: callable}``."""


@dataclass(frozen=True)
class LocalQueue:
    """A queue as the local runtime runs it: its handler and its settings."""

    handler: Handler
    settings: QueueSettings


def load_handlers(
    handlers: Handlers, overrides: Mapping[str, Any] | None = None
) -> dict[str, LocalQueue]:
    """Every queue of `handlers`, with `overrides` applied to each queue's settings."""
    if isinstance(handlers, Mapping):
        loaded = {
            check_queue_name(name): LocalQueue(bind(handler), QueueSettings())
            for name, handler in handlers.items()
        }
    else:
        loaded = {
            name: LocalQueue(import_handler(spec.path), spec.settings)
            for name, spec in discover_handlers(handlers).items()
        }
    if not loaded:
        raise ConfigError(f"no handlers in {handlers!r}")
    return {
        name: LocalQueue(queue.handler, with_overrides(queue.settings, overrides))
        for name, queue in loaded.items()
    }


def with_overrides(settings: QueueSettings, overrides: Mapping[str, Any] | None) -> QueueSettings:
    """`settings` with some fields replaced; unknown fields and bad values are `ConfigError`."""
    if not overrides:
        return settings
    return QueueSettings.from_mapping({**settings.to_dict(), **overrides})


def module_name(resolved: Path) -> str:
    """``handlers.<queue>`` as on Lambda, the module's folder on the ``handlers`` package's
    path; a private name when ``handlers.<queue>`` is a module this loader did not load from
    this file (another folder's, or one imported as the worker Lambda does, with its state)."""
    folder = str(resolved.parent)
    package = sys.modules.get(HANDLERS_PACKAGE)
    if package is None:
        package = types.ModuleType(HANDLERS_PACKAGE)
        package.__path__ = []
        sys.modules[HANDLERS_PACKAGE] = package
    paths = package.__path__
    if folder not in list(paths) and isinstance(paths, list):
        paths.append(folder)  # as a namespace package spans the folders of sys.path
    name = f"{HANDLERS_PACKAGE}.{resolved.stem}"
    existing = sys.modules.get(name)
    ours = getattr(existing, LOADED_MARK, None) == str(resolved)
    if folder in list(paths) and (existing is None or ours):
        return name
    digest = hashlib.sha1(folder.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"_s3queue_handler_{digest}_{resolved.stem}"


def import_handler(path: Path) -> Handler:
    """The ``handle`` function of the module at `path`, bound to its body model if it declares
    one (`s3queue.working.typed`); `ConfigError` if it cannot be had."""
    resolved = path.resolve()
    root = str(resolved.parent.parent)
    if root not in sys.path:
        sys.path.append(root)
    name = module_name(resolved)
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise ConfigError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs, as `import` does: pydantic resolves a model's string
        # annotations (`from __future__ import annotations`) in sys.modules[cls.__module__].
        sys.modules[name] = module
        setattr(module, LOADED_MARK, str(resolved))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # any failure of user code at import, named with its file
            del sys.modules[name]
            raise ConfigError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    handle: Callable[..., object] | None = getattr(module, HANDLER_NAME, None)
    if not callable(handle):
        raise ConfigError(f"{path}: `{HANDLER_NAME}` is not a function")
    try:
        return bind(handle)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def forget_handlers(folder: str | os.PathLike[str]) -> None:
    """Drop the modules loaded from `folder` (and the folder from the ``handlers`` package's
    path), so the next `load_handlers` imports them afresh."""
    root = Path(folder).resolve()
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if origin is not None and Path(origin).parent == root:
            del sys.modules[name]
    package = sys.modules.get(HANDLERS_PACKAGE)
    paths = getattr(package, "__path__", None)
    if isinstance(paths, list) and str(root) in paths:
        paths.remove(str(root))

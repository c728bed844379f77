"""Settings, the environment variable names, the queue map codec and handler discovery.

One source of truth for what the CDK stack, the Lambda functions and the core must agree on
(with `s3queue.names` and `s3queue.metric_names`): the stack imports only these three modules.
The core never reads ``os.environ``; the Lambda entry points call ``from_env`` once per
container. Handler modules are read with `ast`, never imported, so the stack and the local
runtime learn the queues and their settings without running user code::

    SETTINGS = {"visibility_timeout": 120, "max_retries": 3, "memory": 512}

    def handle(message): ...

Over the house's ~300 lines because these are the contracts together: splitting them would
give the stack more modules to import, not fewer.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from s3queue.errors import ConfigError as ConfigError  # noqa: PLC0414 - re-exported from its old home
from s3queue.names import QUEUE_NAME

ENV_BUCKET = "S3QUEUE_BUCKET"
ENV_PREFIX = "S3QUEUE_PREFIX"
ENV_QUEUE = "S3QUEUE_QUEUE"
"""The worker function's queue."""
ENV_QUEUES = "S3QUEUE_QUEUES"
"""The coordinator's queues: `QueueMap.encode` text."""
ENV_SETTINGS = "S3QUEUE_SETTINGS"
"""The worker's queue settings: JSON of `QueueSettings` fields."""
ENV_ENDPOINT_URL = "S3QUEUE_ENDPOINT_URL"
"""Optional S3 endpoint (local S3 servers)."""

DEFAULT_PREFIX = "s3queue"


@dataclass(frozen=True)
class QueueSettings:
    """Per-queue behaviour; a handler module's ``SETTINGS`` literal overrides the defaults."""

    visibility_timeout: float = 30.0
    """Seconds a claim lasts without a heartbeat before the ticket may be redelivered."""
    max_retries: int = 5
    """Retries after the first attempt; the failure after the last retry dead-letters."""
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    batch_size: int = 10
    """Messages per ticket (a packed object counts its messages; one larger than a ticket
    rides alone) while there are free ticket slots for what is ready."""
    max_batch_size: int = 1000
    """Under a backlog, tickets grow up to this many messages (sizing.py)."""
    ticket_seconds: float = 2.0
    """Under a backlog, a grown ticket holds about this many seconds of work at the pace recent
    tickets finished (sizing.py); at most half of `timeout`, whatever this says."""
    max_in_flight_tickets: int = 32
    """Backpressure: the coordinator dispatches no more tickets while this many are live."""
    max_message_bytes: int = 10 * 1024 * 1024
    """Larger objects go to the DLQ unread by the handler."""
    concurrency: int = 8
    """Reserved concurrency of the worker Lambda (deployment only)."""
    memory: int = 256
    """Worker Lambda memory in MB (deployment only)."""
    timeout: int = 60
    """Worker Lambda timeout in seconds (deployment only); at least `visibility_timeout`."""

    def __post_init__(self) -> None:
        positive = (
            "visibility_timeout",
            "batch_size",
            "max_in_flight_tickets",
            "backoff_cap",
            "ticket_seconds",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_retries < 0 or self.backoff_base < 0:
            raise ConfigError("max_retries and backoff_base must not be negative")
        if self.max_batch_size < self.batch_size:
            raise ConfigError(
                f"max_batch_size ({self.max_batch_size}) must be at least batch_size "
                f"({self.batch_size})"
            )
        if self.timeout < self.visibility_timeout:
            raise ConfigError(
                f"timeout ({self.timeout}s) must be at least visibility_timeout "
                f"({self.visibility_timeout}s)"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> QueueSettings:
        """Settings from a dict (a handler's SETTINGS); unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; known: {sorted(known)}")
        converted: dict[str, Any] = {}
        for name, value in values.items():
            kind = float if known[name].type == "float" else int
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"setting {name} must be a number, got {value!r}")
            converted[name] = kind(value)
        return replace(
            cls(timeout=max(60, int(converted.get("visibility_timeout", 0)))), **converted
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def delta(self) -> dict[str, Any]:
        """The fields that differ from the defaults: ``from_mapping(delta())`` is equal."""
        default = QueueSettings()
        return {
            f.name: v
            for f in fields(self)
            if (v := getattr(self, f.name)) != getattr(default, f.name)
        }


@dataclass(frozen=True)
class CoordinatorSettings:
    """How the coordinator leads, scans and reaps."""

    lease_ttl: float = 30.0
    """Seconds a leader lease lasts without renewal; renewed at a third of it."""
    skew_tolerance: float = 5.0
    """Seconds of clock skew between machines that never causes a premature takeover."""
    sweep_interval: float = 60.0
    """Seconds between full rescans of the queue for stragglers behind the cursor."""
    straggler_margin: float = 2.0
    """Seconds the incremental scan re-reads behind its cursor."""
    dispatch_timeout: float = 30.0
    """Seconds an unclaimed ticket waits before its worker is invoked again."""
    scan_pages: int = 2
    """LIST pages read per tick at most (bounds a tick's cost whatever the backlog)."""
    tombstone_ttl: float = 3600.0
    """Seconds a consumed copy's tombstone is kept (see apply.py) before the scan deletes it:
    longer than any applier stays paused between its commit and its apply."""
    publish_concurrency: int = 16
    """Tickets a tick publishes (PUT and invoke) at once; their seqs are reserved as a block
    first (one lease PUT; lease.py). 1: one after another, no reservation."""
    partitions_per_tick: int = 64
    """Partitions a tick reads at most (one LIST each), in turns when a queue has more."""
    discover_interval: float = 1.0
    """Seconds between LISTs of the queue's partition folders (a new partition waits at most
    this long to be read)."""


@dataclass(frozen=True)
class QueueMap:
    """The coordinator's queues: each one's worker function and settings (``S3QUEUE_QUEUES``).

    Encoded compactly, because Lambda allows 4 KB for all of a function's variables: settings
    as deltas from the defaults with each distinct delta written once, function names after
    their shared ``<stack>_`` head, and the whole zlib-compressed (``zlib:`` + base64) when the
    plain JSON is longer than `PLAIN_LIMIT`.
    """

    functions: dict[str, str] = field(default_factory=dict)
    settings: dict[str, QueueSettings] = field(default_factory=dict)

    def encode(self) -> str:
        head = _shared_head(self.functions)
        profiles: list[dict[str, Any]] = []
        queues: dict[str, Any] = {}
        for queue in sorted(self.functions):
            delta = self.settings.get(queue, QueueSettings()).delta()
            if delta not in profiles:
                profiles.append(delta)
            rest = self.functions[queue][len(head) :]
            index = profiles.index(delta)
            queues[queue] = index if rest == queue else [index, rest]
        doc = {"v": QUEUE_MAP_VERSION, "head": head, "profiles": profiles, "queues": queues}
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        if len(text) <= PLAIN_LIMIT:
            return text
        return COMPRESSED + base64.b64encode(zlib.compress(text.encode(), 9)).decode()

    @classmethod
    def decode(cls, text: str) -> QueueMap:
        """The map from `encode`'s text; anything else is a `ConfigError` naming the variable."""
        try:
            if text.startswith(COMPRESSED):
                text = zlib.decompress(base64.b64decode(text[len(COMPRESSED) :])).decode()
            doc = json.loads(text or "{}")
            return cls._from_doc(doc) if doc else cls()
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, zlib.error) as exc:
            raise ConfigError(f"{ENV_QUEUES} is not a valid queue map: {exc!r}") from exc

    @classmethod
    def _from_doc(cls, doc: dict[str, Any]) -> QueueMap:
        if doc.get("v") != QUEUE_MAP_VERSION:
            raise ConfigError(f"{ENV_QUEUES}: unknown version {doc.get('v')!r}")
        head, profiles = str(doc["head"]), doc["profiles"]
        functions: dict[str, str] = {}
        settings: dict[str, QueueSettings] = {}
        for queue, entry in doc["queues"].items():
            index, rest = (entry, queue) if isinstance(entry, int) else entry
            functions[queue] = head + str(rest)
            settings[queue] = QueueSettings.from_mapping(profiles[index])
        return cls(functions, settings)


QUEUE_MAP_VERSION = 2
PLAIN_LIMIT = 2048
"""Longer plain JSON is compressed: unreadable in the console, but a hundred queues fit."""
COMPRESSED = "zlib:"


def _shared_head(functions: Mapping[str, str]) -> str:
    """The ``<stack>_`` every name is ``<head><queue>`` of, if they agree; else empty."""
    heads = {name[: -len(queue)] for queue, name in functions.items() if name.endswith(queue)}
    if len(heads) == 1:
        (head,) = heads
        if all(name.startswith(head) for name in functions.values()):
            return head
    return ""


@dataclass(frozen=True)
class Environment:
    """What a Lambda function reads from its environment, once per container."""

    bucket: str
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    queue: str | None = None
    settings: QueueSettings = field(default_factory=QueueSettings)
    queues: QueueMap = field(default_factory=QueueMap)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        bucket = env.get(ENV_BUCKET)
        if not bucket:
            raise ConfigError(f"{ENV_BUCKET} is not set")
        try:
            settings = json.loads(env.get(ENV_SETTINGS) or "{}")
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{ENV_SETTINGS} is not valid JSON: {exc}") from exc
        return cls(
            bucket=bucket,
            prefix=env.get(ENV_PREFIX) or DEFAULT_PREFIX,
            endpoint_url=env.get(ENV_ENDPOINT_URL) or None,
            queue=env.get(ENV_QUEUE) or None,
            settings=QueueSettings.from_mapping(settings),
            queues=QueueMap.decode(env.get(ENV_QUEUES) or ""),
        )


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

"""Names the stack, the functions and the core must agree on: key segments and function names.

Pure: no I/O, no imports from the rest of the package, so the CDK app may import it (with
the rest of `s3queue.contract`) without loading queue logic. `s3queue.protocol.keys`
builds every key of a queue from these segments::

    <prefix>/<queue>/coordinator  dlq/  ids/  inbox/  msg/  parts/  tickets/
    <prefix>/_idempotency/<queue>/         (`s3queue.idempotency`'s records)
"""

from __future__ import annotations

import hashlib
import re

QUEUE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
"""A queue name: the handler module's file name, a key segment and part of resource names."""

LEASE = "coordinator"
DLQ = "dlq/"
IDS = "ids/"
INBOX = "inbox/"
MSG = "msg/"
PARTS = "parts/"
TICKETS = "tickets/"
EXPIRING_SEGMENTS = (IDS, DLQ)
"""What a lifecycle rule may expire: dedup markers and dead letters, never live work."""
IDEMPOTENCY = "_idempotency/"
"""Beside the queues, holding Powertools Idempotency records: a leading ``_`` is never a queue
name, so no queue's keys, grants or lifecycle rules cover it."""

STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,39}$")
"""A stack name short enough to prefix every worker's function name."""
FUNCTION_NAME_MAX = 64
WORKER_SEPARATOR = "_"
"""Between stack and queue in a worker's name; stack names have no ``_``, so no other stack's
worker name starts with ``<stack>_`` (the coordinator's invoke permission relies on it)."""
_HASH_CHARS = 8


def queue_root(prefix: str, queue: str) -> str:
    """``<prefix>/<queue>/``: every key of the queue starts with it."""
    return f"{prefix}/{queue}/"


def queue_of_key(prefix: str, key: str) -> str | None:
    """The queue a message key under ``msg/``, ``parts/`` or ``inbox/`` belongs to (what an S3
    Object Created event names), or None."""
    root = f"{prefix}/"
    if not key.startswith(root):
        return None
    queue, _, segment = key[len(root) :].partition("/")
    if not QUEUE_NAME.match(queue):
        return None
    return queue if segment.startswith((MSG, INBOX, PARTS)) else None


def idempotency_root(prefix: str, queue: str | None = None) -> str:
    """``<prefix>/_idempotency/``, and ``<queue>/`` below it: one queue's records only."""
    root = f"{prefix}/{IDEMPOTENCY}"
    return f"{root}{queue}/" if queue else root


def worker_function_prefix(stack_name: str) -> str:
    """What every worker function name of the stack starts with, and no other function's."""
    return stack_name + WORKER_SEPARATOR


def worker_function_name(stack_name: str, queue: str) -> str:
    """``<stack>_<queue>``, or a hash-suffixed cut of it when over Lambda's 64 characters."""
    name = worker_function_prefix(stack_name) + queue
    if len(name) <= FUNCTION_NAME_MAX:
        return name
    digest = hashlib.sha256(queue.encode()).hexdigest()[:_HASH_CHARS]
    keep = FUNCTION_NAME_MAX - len(worker_function_prefix(stack_name)) - _HASH_CHARS - 1
    return f"{worker_function_prefix(stack_name)}{queue[:keep]}-{digest}"

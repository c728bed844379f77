"""Conditional writes are atomic on the real server: of 16 racing writers exactly one wins.

This is the property the whole queue rests on (claims, leases, tickets), so it is checked on
SeaweedFS, every round, never on moto (which checks, then writes, without a lock).

SeaweedFS serialises conditional writes to one key under a lock whose waiters retry about once
a second, so one round of 16 writers takes seconds and 20 rounds in a row would take minutes.
The rounds therefore run at the same time, each on its own key with its own barrier: every
round is still 16 writers released together onto one key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from s3queue.errors import Conflict
from s3queue.local.seaweed import EmbeddedS3
from s3queue.storage import new_token
from s3queue.storage.s3 import S3Storage

pytestmark = pytest.mark.s3

WRITERS = 16
ROUNDS = 20
CLIENTS = 5  # 64 pooled connections each: one per thread, no "pool is full" churn

Write = Callable[[S3Storage, str, int], str]


@pytest.fixture(scope="module")
def stores(seaweed: EmbeddedS3) -> list[S3Storage]:
    """Storages on one new bucket, over several clients so that every thread has a connection."""
    clients: list[Any] = [seaweed.make_client() for _ in range(CLIENTS)]
    bucket = f"race-{new_token()}"
    seaweed.create_bucket(bucket)
    return [S3Storage(client, bucket, sleep=lambda _: None) for client in clients]


def race(
    stores: list[S3Storage], keys: list[str], write: Write
) -> dict[str, list[tuple[int, str]]]:
    """Release WRITERS writers onto each key together; return each key's (writer, etag) wins."""
    barriers = {key: threading.Barrier(WRITERS) for key in keys}

    def attempt(job: tuple[int, str, int]) -> tuple[str, int, str | None]:
        index, key, writer = job
        barriers[key].wait(timeout=60)
        try:
            return key, writer, write(stores[index % len(stores)], key, writer)
        except Conflict:
            return key, writer, None

    jobs = [(i, key, writer) for i, (key, writer) in enumerate(_pairs(keys))]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(attempt, jobs))
    wins: dict[str, list[tuple[int, str]]] = {key: [] for key in keys}
    for key, writer, etag in results:
        if etag is not None:
            wins[key].append((writer, etag))
    return wins


def _pairs(keys: list[str]) -> list[tuple[str, int]]:
    return [(key, writer) for key in keys for writer in range(WRITERS)]


def test_if_match_has_exactly_one_winner(stores: list[S3Storage]) -> None:
    store = stores[0]
    keys = [f"q/lease/{r:03d}" for r in range(ROUNDS)]
    # GIVEN every writer of a round read the same version of its key
    base = {key: store.put(key, b"base", token=new_token()) for key in keys}

    # WHEN they all swap it at once
    wins = race(
        stores,
        keys,
        lambda s, key, w: s.put(key, f"writer {w}".encode(), if_match=base[key], token=new_token()),
    )

    # THEN exactly one swap applied per round, and the object is the winner's
    for key in keys:
        assert len(wins[key]) == 1, f"{key}: winners {wins[key]}"
        [(writer, etag)] = wins[key]
        current = store.get(key)
        assert current is not None
        assert (current.body, current.etag) == (f"writer {writer}".encode(), etag)


def test_if_none_match_has_exactly_one_winner(stores: list[S3Storage]) -> None:
    store = stores[0]
    keys = [f"q/ticket/{r:03d}" for r in range(ROUNDS)]

    wins = race(
        stores,
        keys,
        lambda s, key, w: s.put(key, f"writer {w}".encode(), if_none_match=True, token=new_token()),
    )

    for key in keys:
        assert len(wins[key]) == 1, f"{key}: winners {wins[key]}"
        [(writer, etag)] = wins[key]
        current = store.get(key)
        assert current is not None
        assert (current.body, current.etag) == (f"writer {writer}".encode(), etag)

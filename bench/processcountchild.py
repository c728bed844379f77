"""``python bench/processcountchild.py OUT <s3queue arguments>``: `bench.hidingchild`, and a
count of every storage call this process made (`bench.processcount`).

Run by its path, with the code under test first on ``PYTHONPATH``: the child imports that
code's `s3queue` and `bench.hidingchild`, so an older commit can be measured. Each call is
counted by the calling thread's role (its name without the number: ``s3queue-pull-read``,
``s3queue-worker``, ``MainThread`` for the progress and drain checks...), the call (``put``,
``put+if_match``...), the kind of key (``tickets``, ``msg``, ``coordinator``...) and its
outcome (``ok``, ``none`` for a missing object, ``conflict`` for a lost condition: a claim
lost to another process is a ``put+if_match tickets conflict``). Written to ``OUT.calls``.
"""

from __future__ import annotations

import time

STARTED = time.time()

import collections  # noqa: E402 - after the start time, as bench.hidingchild
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from s3queue.errors import Conflict  # noqa: E402
from s3queue.storage.s3 import S3Storage  # noqa: E402

KINDS = ("msg", "inbox", "tickets", "dlq", "coordinator", "chain", "budgets", "parts")
COUNTED = ("get", "head", "put", "delete", "list", "list_folders", "delete_many")
counts: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
lock = threading.Lock()


def _kind(key: object) -> str:
    if isinstance(key, list | tuple):
        key = key[0] if key else ""
    parts = str(key).split("/")
    return next((kind for kind in KINDS if kind in parts), "other")


def _counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def counted(self: S3Storage, key: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(key) if name == "delete_many" else key
        outcome = "ok"
        try:
            found = call(self, keys, *args, **kwargs)
            if found is None and name in ("get", "head"):
                outcome = "none"
            return found
        except Conflict:
            outcome = "conflict"
            raise
        finally:
            how = "+if_match" if kwargs.get("if_match") and name != "delete_many" else ""
            how = "+if_none_match" if kwargs.get("if_none_match") else how
            role = re.sub(r"[-_]?\d+(_\d+)?$", "", threading.current_thread().name)
            with lock:
                counts[(role, name + how, _kind(keys), outcome)] += 1

    return counted


def main(argv: list[str]) -> int:
    for name in COUNTED:
        setattr(S3Storage, name, _counted(name, getattr(S3Storage, name)))
    import bench.hidingchild as child  # noqa: PLC0415 - once the storage is counted

    child.STARTED = STARTED
    code = child.main(argv)
    with open(argv[0] + ".calls", "w") as stream:
        json.dump([[*key, n] for key, n in counts.items()], stream)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``s3queue dev --reload``: run again, with fresh handler modules, when the folder changes.

A watch thread hashes the folder's ``*.py`` files and ``requirements.txt`` once a second; on
a change it stops the current run the clean way (workers finish or release their tickets,
the leader hands over), the handler modules are forgotten, and the run starts again on the
same connection and server. Packages the handlers import are not reloaded.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from s3queue.local.loader import forget_handlers

POLL_SECONDS = 1.0
WATCHED = ("*.py", "requirements.txt")
Result = TypeVar("Result")


def fingerprint(folder: Path) -> str:
    """A digest of every watched file's name and bytes."""
    digest = hashlib.sha256()
    for pattern in WATCHED:
        for path in sorted(folder.glob(pattern)):
            try:
                data = path.read_bytes()
            except OSError:  # removed while we looked: the next look sees it gone
                data = b""
            digest.update(path.name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def watch(folder: Path, changed: threading.Event, done: threading.Event) -> threading.Thread:
    """Set `changed` when the folder's fingerprint moves; stop looking once `done` is set."""
    start = fingerprint(folder)

    def loop() -> None:
        while not done.wait(POLL_SECONDS):
            if fingerprint(folder) != start:
                changed.set()
                return

    thread = threading.Thread(target=loop, name="s3queue-reload-watch", daemon=True)
    thread.start()
    return thread


def run_reloading(
    run: Callable[[threading.Event], Result],
    folder: Path,
    stop: threading.Event,
    notify: Callable[[str], None],
) -> Result:
    """Call ``run(run_stop)`` until `stop` is set; each change of `folder` sets ``run_stop``,
    and the next run loads the handlers afresh. The last run's result."""
    while True:
        run_stop, changed, done = threading.Event(), threading.Event(), threading.Event()
        watcher = watch(folder, changed, done)
        relay = threading.Thread(target=_relay, args=(stop, changed, run_stop, done), daemon=True)
        relay.start()
        try:
            result = run(run_stop)
        finally:
            done.set()
            watcher.join()
            relay.join()
        if stop.is_set() or not changed.is_set():
            return result
        notify(f"{folder}: a handler changed; reloading")
        forget_handlers(folder)


def _relay(
    stop: threading.Event,
    changed: threading.Event,
    run_stop: threading.Event,
    done: threading.Event,
) -> None:
    """Stop the run when the user stops or the folder changes, whichever comes first."""
    while not done.is_set():
        if stop.wait(0.2) or changed.is_set():
            run_stop.set()
            return

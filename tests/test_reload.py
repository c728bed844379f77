"""``s3queue dev --reload``: an edited handler module runs from the next message on."""

from __future__ import annotations

import queue
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3queue import Queue
from s3queue.local.reloading import fingerprint, run_reloading
from s3queue.local.runtime import run_local
from s3queue.storage.memory import MemoryStorage

HANDLER = """
import reload_probe


def handle(message):
    reload_probe.seen.put(({version!r}, message.body))
"""


@pytest.fixture
def probe() -> Iterator[types.ModuleType]:
    """Where the handler reports what ran: a module the test holds (a blocking get joins)."""
    module = types.ModuleType("reload_probe")
    module.seen = queue.Queue()  # type: ignore[attr-defined]
    sys.modules["reload_probe"] = module
    yield module
    del sys.modules["reload_probe"]


def test_an_edited_handler_runs_from_the_next_message_on(
    tmp_path: Path, probe: types.ModuleType
) -> None:
    # GIVEN dev running a folder's handler, version 1, with one message
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "resize.py").write_text(HANDLER.format(version="v1"))
    storage = MemoryStorage()
    Queue("resize", storage=storage).enqueue(1)
    stop = threading.Event()
    notes: queue.Queue[str] = queue.Queue()

    def run(run_stop: threading.Event) -> object:
        return run_local(folder, storage=storage, stop=run_stop, workers=1)

    runner = threading.Thread(target=run_reloading, args=(run, folder, stop, notes.put))
    runner.start()
    try:
        assert probe.seen.get(timeout=60) == ("v1", 1)
        # WHEN the module is edited, and a message comes after the reload
        (folder / "resize.py").write_text(HANDLER.format(version="v2"))
        assert "a handler changed; reloading" in notes.get(timeout=60)
        Queue("resize", storage=storage).enqueue(2)
        # THEN the new version runs it
        assert probe.seen.get(timeout=60) == ("v2", 2)
    finally:
        stop.set()
        runner.join()
    assert probe.seen.empty()


def test_the_fingerprint_moves_with_any_handler_file(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    first = fingerprint(tmp_path)
    (tmp_path / "notes.md").write_text("not watched")
    assert fingerprint(tmp_path) == first
    (tmp_path / "_shared.py").write_text("y = 2\n")
    second = fingerprint(tmp_path)
    assert second != first
    (tmp_path / "requirements.txt").write_text("humanize\n")
    assert fingerprint(tmp_path) != second

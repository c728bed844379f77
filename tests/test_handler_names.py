"""Local handler modules are named as on Lambda, ``handlers.<queue>``, whatever their folder's
name: names derived from the module (Powertools Idempotency's keys) agree in both places."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from s3queue.local.loader import load_handlers

HANDLER = """
from handlers._shared import PREFIX


def handle(message):
    return PREFIX + message.body
"""
PROBE = """
import json, sys
from s3queue.local.loader import load_handlers

load_handlers(sys.argv[1])
module = sys.modules["handlers.resize"]
print(json.dumps([module.handle.__module__, module.__file__, module.PREFIX]))
"""


def folder(root: Path, name: str) -> Path:
    handlers = root / name
    handlers.mkdir(parents=True)
    (handlers / "resize.py").write_text(HANDLER)
    (handlers / "_shared.py").write_text(f"PREFIX = {name!r}\n")
    return handlers


def test_a_folder_of_any_name_loads_as_the_handlers_package(tmp_path: Path) -> None:
    # GIVEN a handler folder named "jobs", importing a sibling as Lambda would (handlers._shared)
    jobs = folder(tmp_path, "jobs")
    # WHEN a fresh process (as `s3queue dev` is) loads it
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(jobs)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # THEN the module is handlers.resize, from the folder, as the worker Lambda imports it
    assert done.returncode == 0, done.stderr
    name, origin, prefix = json.loads(done.stdout)
    assert name == "handlers.resize"
    assert Path(origin) == (jobs / "resize.py").resolve()
    assert prefix == "jobs"


def test_two_folders_in_one_process_keep_their_own_modules(tmp_path: Path) -> None:
    one = load_handlers(folder(tmp_path / "a", "jobs"))["resize"].handler
    two = load_handlers(folder(tmp_path / "b", "work"))["resize"].handler
    assert one is not two

"""``python -m bench.hidingchild OUT <s3queue arguments>``: `s3queue` as the hiding scenario runs
it, noting when this process's handlers ran (issue 22, item 4).

The command line is `s3queue.local.cli`'s, unchanged; only an event listener is added to its
runtime, which keeps the first ``handler_start`` and the time of every ``handler_finish`` (no
I/O while it runs) and writes them, with when the process started and when its runtime did,
to `OUT` as JSON at exit. So the scenario can tell a drain's steady rate (the middle of the
finishes of all processes, `bench.drainrate`) from its wall time, which also counts interpreter
start-up, connecting, the leader's lease and the ``--drain`` checks before exit.
"""

from __future__ import annotations

import time

STARTED = time.time()

import json  # noqa: E402 - after the start time: imports are part of what is timed
import sys  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

from s3queue.common.events import Event  # noqa: E402
from s3queue.local import cli, dev  # noqa: E402


class Times:
    """First handler start, every handler finish (the drain's steady middle: `bench.drainrate`),
    in ms since the epoch."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first_start: int | None = None
        self.last_finish: int | None = None
        self.handled = 0
        self.finishes: list[int] = []
        self.runtime: float | None = None

    def __call__(self, event: Event) -> None:
        if event.kind == "handler_start":
            with self.lock:
                if self.first_start is None:
                    self.first_start = event.at_ms
        elif event.kind == "handler_finish":
            with self.lock:
                self.handled += 1
                self.last_finish = event.at_ms
                self.finishes.append(event.at_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "process_start_ms": round(STARTED * 1000),
            "runtime_start_ms": None if self.runtime is None else round(self.runtime * 1000),
            "first_start_ms": self.first_start,
            "last_finish_ms": self.last_finish,
            "handled": self.handled,
            "finishes_ms": self.finishes,
            "exit_ms": round(time.time() * 1000),
        }


def main(argv: list[str]) -> int:
    out, args = argv[0], argv[1:]
    times = Times()
    run_local = dev.run_local

    def listened(*a: Any, **kw: Any) -> Any:
        times.runtime = time.time()
        return run_local(*a, listener=times, **kw)

    dev.run_local = listened  # type: ignore[assignment]
    code = cli.main(args)
    with open(out, "w") as stream:
        json.dump(times.as_dict(), stream)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

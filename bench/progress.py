"""`Progress`: one progress bar over the whole run, fed by each scenario's stages.

Each scenario is given a weight (its expected share of the run's time); inside it, a stage
reports the fraction it has done. On a terminal the bar redraws in place; otherwise (a log,
CI) a line is printed at most every ten seconds and at each stage's end.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

WIDTH = 30
LOG_EVERY = 10.0
REDRAW_EVERY = 0.1


class Progress:
    """``with progress.scenario("throughput", weight): progress.update(0.5, "W=4")``."""

    def __init__(self, weights: dict[str, float], stream: TextIO | None = None) -> None:
        self._weights = weights
        self._total = sum(weights.values()) or 1.0
        self._done = 0.0
        self._current = ""
        self._fraction = 0.0
        self._detail = ""
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._started = time.monotonic()
        self._printed = 0.0
        self._lock = threading.RLock()

    def start(self, name: str) -> None:
        """Begin a scenario."""
        with self._lock:
            self._current, self._fraction, self._detail = name, 0.0, ""
        self._draw(force=True)

    def update(self, fraction: float, detail: str = "") -> None:
        """The current scenario is this far along (0..1)."""
        with self._lock:
            self._fraction = min(max(fraction, self._fraction), 1.0)
            self._detail = detail
        self._draw()

    def finish(self) -> None:
        """End the current scenario."""
        with self._lock:
            self._done += self._weights.get(self._current, 0.0)
            self._fraction, self._detail = 0.0, "done"
        self._draw(force=True)

    def close(self) -> None:
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()

    def line(self) -> str:
        with self._lock:
            weight = self._weights.get(self._current, 0.0)
            share = (self._done + weight * self._fraction) / self._total
            name, detail = self._current, self._detail
        filled = round(share * WIDTH)
        elapsed = time.monotonic() - self._started
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"[{bar}] {share:4.0%} {_clock(elapsed)} {name}: {detail}"

    def _draw(self, *, force: bool = False) -> None:
        with self._lock:
            self._write(force)

    def _write(self, force: bool) -> None:
        now = time.monotonic()
        if self._tty and (force or now - self._printed >= REDRAW_EVERY):
            self._stream.write("\r\x1b[2K" + self.line()[:150])
        elif not self._tty and (force or now - self._printed >= LOG_EVERY):
            self._stream.write(self.line() + "\n")
        else:
            return
        self._printed = now
        self._stream.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"

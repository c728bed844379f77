"""`WorkerPool`: the local stand-in for Lambda's fleet, threads that process ticket payloads.

A thread never takes the pool down with it: an `Exception` from processing is logged and
counted (the ticket's lease redelivers its work, as after a crashed Lambda), and a thread that
dies anyway (a `BaseException` such as a handler's ``SystemExit`` escaping the worker) is
replaced by `revive`, which the runtime's monitor calls on every poll.
"""

from __future__ import annotations

import logging
import queue as queues
import threading
from collections.abc import Callable

from s3queue.protocol.tickets import Invocation

log = logging.getLogger(__name__)

Payload = Invocation


class WorkerPool:
    """`size` threads running `process` on each payload handed to `invoke`."""

    def __init__(
        self, process: Callable[[Payload], None], size: int, name: str = "s3queue-worker"
    ) -> None:
        self._process = process
        self._name = name
        self._numbers = iter(range(1 << 62))
        self._stopping = False
        self.payloads: queues.Queue[Payload | None] = queues.Queue()
        self.freed = threading.Event()
        """Set whenever a thread finishes a payload: time to pull more work."""
        self.lock = threading.Lock()
        self.busy = 0
        self._working: set[str] = set()
        """Ticket keys handed to a thread and not finished yet."""
        self.errors = 0
        """Payloads whose processing raised (logged; the lease protocol redelivers them)."""
        self.replaced = 0
        """Threads that died and were replaced."""
        self.threads = [self._thread() for _ in range(max(size, 1))]

    def _thread(self) -> threading.Thread:
        name = f"{self._name}-{next(self._numbers)}"
        return threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def invoke(self, payload: Payload) -> None:
        """Hand a payload to the next free thread (the local ``lambda:Invoke``)."""
        with self.lock:
            self._working.add(str(payload.get("ticket")))
        self.payloads.put(payload)

    def offer(self, payload: Payload) -> bool:
        """Take a payload only if a thread is free to start it now; else leave it (False).

        A published ticket not taken stays pending in S3, where any runtime's `Puller` (this
        one's included, as soon as a thread frees up) claims it: so the work of a queue spreads
        over every process that runs it, instead of queueing behind the leader's threads.
        """
        with self.lock:
            if self.busy + self.payloads.qsize() >= len(self.threads):
                return False
            self._working.add(str(payload.get("ticket")))
            self.payloads.put(payload)
            return True

    def working(self) -> frozenset[str]:
        """The tickets handed to threads and not finished: this process needs no news of them."""
        with self.lock:
            return frozenset(self._working)

    def free(self) -> int:
        """Threads that could start a payload now."""
        with self.lock:
            return max(len(self.threads) - self.busy - self.payloads.qsize(), 0)

    def idle(self) -> bool:
        with self.lock:
            return self.busy == 0 and self.payloads.empty()

    def revive(self) -> int:
        """Replace every thread that died; how many were replaced."""
        with self.lock:
            if self._stopping:
                return 0
            dead = [i for i, t in enumerate(self.threads) if t.ident and not t.is_alive()]
            for index in dead:
                log.error("worker thread %s died; starting a new one", self.threads[index].name)
                self.threads[index] = self._thread()
                self.threads[index].start()
            self.replaced += len(dead)
        return len(dead)

    def stop(self) -> None:
        """End every thread once it has taken what was handed to it before (stop the runtime
        first: the workers then release such tickets at once)."""
        with self.lock:
            self._stopping = True
            threads = list(self.threads)
        for _ in threads:
            self.payloads.put(None)
        for thread in threads:
            if thread.ident:
                thread.join()

    def _run(self) -> None:
        while (payload := self.payloads.get()) is not None:
            with self.lock:
                self.busy += 1
            try:
                self._process(payload)
            except Exception:  # like a crashed Lambda: logged, counted, redelivered by the lease
                log.exception("ticket %s failed", payload.get("ticket"))
                with self.lock:
                    self.errors += 1
            except BaseException:  # this thread ends here; `revive` replaces it
                log.exception("ticket %s ended its worker thread", payload.get("ticket"))
                with self.lock:
                    self.errors += 1
                return
            finally:
                with self.lock:
                    self.busy -= 1
                    self._working.discard(str(payload.get("ticket")))
                self.freed.set()

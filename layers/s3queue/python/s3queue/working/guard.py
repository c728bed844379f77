"""`Guard`: the user's handler as the worker calls it, so that no handler can end a worker.

- An ``Exception`` passes through: the worker records it (retry, or DLQ for `PermanentError`).
- Any other ``BaseException`` the handler raises (``sys.exit()``, ``KeyboardInterrupt``,
  ``GeneratorExit``, ``asyncio.CancelledError``, a test framework's failure) becomes
  `HandlerExit`: a failure of that one message, logged and retried like any other; the
  ticket's other messages go on. Only `WorkerKilled` passes, as a killed process would.
- A ``KeyboardInterrupt`` in the main thread may be a real Ctrl-C: after recording it the worker
  releases the ticket's unstarted messages, commits, and raises it again (`interrupt`). Worker
  threads never receive signals, so there it is always the handler's own.
- A handler that returns after the invocation's time ran out (``remaining_ms() <= 0``) failed
  with `HandlerTimeout`: Lambda stops an invocation at its timeout, and the local runtime, whose
  threads cannot be stopped, records the delivery as Lambda would have ended it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from s3queue.errors import HandlerExit, HandlerTimeout
from s3queue.message import Message

log = logging.getLogger(__name__)

Handler = Callable[[Message], object]


class WorkerKilled(BaseException):
    """Stops a worker dead, as if its process were killed: the one exception no worker catches.

    Tests and harnesses raise it (or a subclass) to simulate a crash inside a handler.
    """


class Guard:
    """Calls one handler for one ticket's messages (see the module docstring)."""

    def __init__(
        self, handler: Handler, remaining_ms: Callable[[], int] | None, timeout: float
    ) -> None:
        self.handler = handler
        self.remaining_ms = remaining_ms
        self.timeout = timeout
        self.interrupt: KeyboardInterrupt | None = None
        """A main-thread KeyboardInterrupt seen: the worker stops after committing."""

    def __call__(self, message: Message) -> object:
        try:
            result = self.handler(message)
        except (Exception, WorkerKilled):
            raise
        except BaseException as exc:  # recorded as that message's failure
            if isinstance(exc, KeyboardInterrupt) and _in_main_thread():
                self.interrupt = exc
            log.warning(
                "handler of message %s raised %s: counted as its failure and retried",
                message.id,
                type(exc).__name__,
                extra={"queue": message.queue, "message_id": message.id},
            )
            raise HandlerExit(f"{type(exc).__name__}: {exc}") from exc
        if self.remaining_ms is not None and self.remaining_ms() <= 0:
            log.warning(
                "handler of message %s returned after the invocation's timeout (%s s): on "
                "Lambda it would have been stopped; counted as a failure and retried",
                message.id,
                self.timeout,
                extra={"queue": message.queue, "message_id": message.id},
            )
            raise HandlerTimeout(
                f"the handler was still running when the invocation's timeout "
                f"({self.timeout} s) ran out"
            )
        return result

    def reraise(self) -> None:
        """Raise the main-thread KeyboardInterrupt seen, if any (after the commit)."""
        if self.interrupt is not None:
            raise self.interrupt


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()

"""Invokers: how a coordinator starts a worker on a ticket (an `Invocation`).

`LambdaInvoker` sends it to the queue's worker function as an asynchronous (``Event``) invoke.
A failed invoke is not lost work: the coordinator logs it and invokes the ticket again once
``dispatch_timeout`` has passed without a claim.

`Background` sends the invokes from threads of their own: a tick waits for its tickets' PUTs
(lease.py needs that), never for Lambda's 202s, so the next tick's LISTs start one invoke
sooner (~30 ms, and the slowest of a block's invokes: issue 22's p99). A Lambda run `drain`s
it before it returns, so that no invoke is left in a frozen container.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from s3queue.common.concurrency import Pending, Submit
from s3queue.errors import InvokeFailed as InvokeFailed  # noqa: PLC0414 - re-exported from its old home
from s3queue.protocol.tickets import Invocation

LOCAL_ONLY = frozenset({"held", "pulled"})
"""An `Invocation`'s fields for a worker in this process, never sent to Lambda."""
ACCEPTED = 202
"""The status Lambda answers to an accepted ``Event`` invoke."""


class LambdaInvoker:
    """Starts a queue's worker function with ``InvocationType="Event"``; one client for all."""

    def __init__(self, lambda_client: Any, function_names: Mapping[str, str]) -> None:
        self._client = lambda_client
        self._functions = dict(function_names)

    def __call__(self, invocation: Invocation) -> None:
        queue = str(invocation["queue"])
        function = self._functions.get(queue)
        if function is None:
            raise InvokeFailed(f"no worker function configured for queue {queue!r}")
        response = self._client.invoke(
            FunctionName=function,
            InvocationType="Event",
            Payload=json.dumps(
                {k: v for k, v in invocation.items() if k not in LOCAL_ONLY}, separators=(",", ":")
            ).encode(),
        )
        status = int(response.get("StatusCode", 0))
        if status != ACCEPTED:
            raise InvokeFailed(
                f"invoke of {function} for {invocation.get('ticket')}: HTTP {status}"
            )


class Background:
    """Jobs (invokes) run on `submit`'s threads; the caller goes on at once. `drain` waits for
    every job sent so far."""

    def __init__(self, submit: Submit) -> None:
        self.submit = submit
        self._sent: list[Pending] = []
        self._lock = threading.Lock()

    def __call__(self, job: Callable[[], None]) -> None:
        pending = self.submit(job)
        with self._lock:
            self._sent.append(pending)

    def drain(self) -> None:
        """Wait until every job sent has returned (a job's own errors are its own to report:
        an invoke's, `Reconciler._invoke` emits)."""
        while True:
            with self._lock:
                sent, self._sent = self._sent, []
            if not sent:
                return
            for pending in sent:
                pending.result()

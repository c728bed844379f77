"""Simulated AWS Lambda: asynchronous invokes, concurrency limits, cold and warm containers.

    coordinator --LambdaInvoker (real)--> SimLambdaClient.invoke (~30 ms, answers 202)
                --> the function's event queue --(delivery ~40 ms)--> a free container?
                      yes: an invocation (an actor) runs the function body, warm or cold
                      no (reserved or account concurrency used up): throttled, retried after
                          1 s, 2 s, 4 s ... (at most 5 min) until the event's maximum age

An invocation holds one unit of concurrency from its start (cold start included) to its end.
Each is billed one request and its duration (from the end of the start to the end, ms) times
its memory in GB-seconds. A container stays warm `keep_warm_s` after its last invocation. The
function keeps running past its timeout here (Lambda would stop it): `late` counts those.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.simaws import LambdaModel
from bench.simkernel import Cpu, Kernel

Body = Callable[[dict[str, Any], "SimContext", Any], object]
"""A function's code: (event, context, the container's state built at its cold start)."""


@dataclass
class SimContext:
    """What a Lambda handler reads from its context."""

    kernel: Kernel
    deadline_ms: float
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int:
        return int(self.deadline_ms - self.kernel.local_ms())


@dataclass
class SimFunction:
    """One Lambda function and what it did."""

    name: str
    role: str
    body: Body
    container: Callable[[], Any]
    """Builds a container's state at a cold start (clients, the worker, ...)."""
    memory_mb: int
    timeout_s: float
    reserved: int | None
    max_event_age_s: float
    running: int = 0
    warm: list[tuple[Any, Cpu, float]] = field(default_factory=list)
    """Warm containers: their state, their CPU, when their last invocation ended."""
    invocations: int = 0
    cold_starts: int = 0
    throttles: int = 0
    dropped: int = 0
    late: int = 0
    billed_ms: float = 0.0
    busy_ms: float = 0.0
    """Concurrency-milliseconds held (starts included): utilisation against `reserved`."""
    peak: int = 0
    active: dict[int, float] = field(default_factory=dict)
    """Invocations running now: their start (after the cold or warm start), ms."""

    def gb_s(self, now_ms: float | None = None) -> float:
        """GB-seconds billed so far; with `now_ms`, running invocations' time up to then too."""
        running = sum(now_ms - s for s in self.active.values()) if now_ms is not None else 0.0
        return (self.billed_ms + running) / 1000 * self.memory_mb / 1024

    def stats(self) -> dict[str, Any]:
        return {
            "invocations": self.invocations,
            "cold_starts": self.cold_starts,
            "throttled_deliveries": self.throttles,
            "dropped_events": self.dropped,
            "past_timeout": self.late,
            "gb_s": round(self.gb_s(), 3),
            "peak_concurrency": self.peak,
            "reserved_concurrency": self.reserved,
            "memory_mb": self.memory_mb,
        }


@dataclass
class _Event:
    function: SimFunction
    payload: dict[str, Any]
    accepted_ms: float
    throttled: int = 0


class LambdaService:
    """Every function of the simulated account."""

    def __init__(self, kernel: Kernel, model: LambdaModel, rng: random.Random) -> None:
        self.kernel, self.model, self.rng = kernel, model, rng
        self.functions: dict[str, SimFunction] = {}
        self.invoke_requests = 0
        self.max_payload_bytes = 0
        self._ids = itertools.count(1)

    def add(self, function: SimFunction) -> SimFunction:
        self.functions[function.name] = function
        return function

    def running(self) -> int:
        return sum(f.running for f in self.functions.values())

    def submit(self, name: str, payload: dict[str, Any]) -> None:
        """An asynchronous event accepted for `name` (Invoke answered 202, or a rule fired)."""
        event = _Event(self.functions[name], payload, self.kernel.now)
        self._later(self.model.delivery.sample(self.rng), event)

    def _later(self, ms: float, event: _Event) -> None:
        self.kernel.call_at(self.kernel.now + ms, lambda: self._deliver(event))

    def _deliver(self, event: _Event) -> None:
        """A timer: start the event in a container, or throttle it."""
        fn, now = event.function, self.kernel.now
        if now - event.accepted_ms > fn.max_event_age_s * 1000:
            fn.dropped += 1
            return
        full = fn.reserved is not None and fn.running >= fn.reserved
        if full or self.running() >= self.model.account_concurrency:
            fn.throttles += 1
            first, ceiling = self.model.throttle_retry_s
            self._later(min(first * 2**event.throttled, ceiling) * 1000, event)
            event.throttled += 1
            return
        fn.running += 1
        fn.peak = max(fn.peak, fn.running)
        container, cpu = self._warm(fn, now)
        number = next(self._ids)
        self.kernel.spawn(
            lambda: self._invoke(fn, event, container, cpu, number),
            at_ms=now,
            name=f"{fn.name}#{number}",
            role=fn.role,
            cpu=cpu,
        )

    def _warm(self, fn: SimFunction, now: float) -> tuple[Any, Cpu]:
        """The most recently used warm container, if one is still warm (else None), and its
        CPU (a new one's: its memory's share of a vCPU)."""
        fn.warm = [w for w in fn.warm if now - w[2] <= self.model.keep_warm_s * 1000]
        if fn.warm:
            container, cpu, _ = fn.warm.pop()
            return container, cpu
        return None, Cpu(self.model.cpu_scale(fn.memory_mb, self.kernel.cpu_scale))

    def _invoke(
        self, fn: SimFunction, event: _Event, container: Any, cpu: Cpu, number: int
    ) -> None:
        kernel = self.kernel
        began = kernel.now
        if container is None:
            kernel.wait(self.model.cold_start.sample(self.rng), "cold start")
            container = fn.container()
            fn.cold_starts += 1
        else:
            kernel.wait(self.model.warm_start.sample(self.rng), "warm start")
        start = kernel.local_ms()
        fn.active[number] = start
        context = SimContext(kernel, start + fn.timeout_s * 1000, f"req-{number:08d}")
        try:
            fn.body(event.payload, context, container)
        finally:
            end = kernel.local_ms()
            fn.active.pop(number, None)
            fn.invocations += 1
            fn.billed_ms += max(1.0, end - start)
            fn.busy_ms += end - began
            fn.late += end - start > fn.timeout_s * 1000
            fn.running -= 1
            fn.warm.append((container, cpu, end))


class SimLambdaClient:
    """The boto3 Lambda client method `LambdaInvoker` calls."""

    def __init__(self, service: LambdaService) -> None:
        self.service = service

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        service = self.service
        service.kernel.wait(service.model.invoke.sample(service.rng), "Invoke")
        service.invoke_requests += 1
        service.max_payload_bytes = max(service.max_payload_bytes, len(Payload))
        if InvocationType != "Event":
            raise ValueError("the simulation models asynchronous invokes only")
        service.submit(FunctionName, json.loads(Payload))
        return {"StatusCode": 202}

"""X-Ray for the Lambda functions: the service's segments always, the SDK's only when asked.

The stack turns on active tracing, so Lambda records every invocation (its init, its duration)
with no code in the function. Powertools' `Tracer` adds a subsegment for the handler and, by
patching botocore, one for each S3 call; it imports the X-Ray SDK to do so, even when disabled,
which was 42-49 % of either function's import (docs/performance.md, *Cold start*: every cold
start pays it) and wraps every S3 call in CPU the worker spends per message. So the functions
use it only when ``S3QUEUE_TRACE_CALLS`` is set (the stack sets it with ``s3queue:traceCalls``);
otherwise `tracer` gives `NoTracer`, whose decorators return the function they wrap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol, cast

ENV_TRACE_CALLS = "S3QUEUE_TRACE_CALLS"
"""Set (``1``/``true``) to trace the handler and each S3 call with Powertools' Tracer."""


class FunctionTracer(Protocol):
    """What the functions use of Powertools' `Tracer`."""

    def capture_lambda_handler(self, lambda_handler: Any = None, **kwargs: Any) -> Any: ...

    def capture_method(self, method: Any = None, **kwargs: Any) -> Any: ...

    def put_annotation(self, key: str, value: Any) -> None: ...


class NoTracer:
    """Powertools' `Tracer` surface, doing nothing: the function keeps Lambda's own segments."""

    def capture_lambda_handler(self, lambda_handler: Any = None, **_: Any) -> Any:
        return lambda_handler if lambda_handler is not None else (lambda f: f)

    def capture_method(self, method: Any = None, **_: Any) -> Any:
        return method if method is not None else (lambda f: f)

    def put_annotation(self, key: str, value: Any) -> None:
        """Nothing records it."""


def traces_calls(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``S3QUEUE_TRACE_CALLS`` (in `environ`, else the process's) asks for the SDK."""
    value = (os.environ if environ is None else environ).get(ENV_TRACE_CALLS, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


def tracer(service: str) -> FunctionTracer:
    """Powertools' `Tracer` for `service` when ``S3QUEUE_TRACE_CALLS`` is set, else `NoTracer`."""
    if traces_calls():
        from aws_lambda_powertools import Tracer  # noqa: PLC0415 - the SDK only when asked

        return cast("FunctionTracer", Tracer(service=service))
    return NoTracer()

"""The functions load the X-Ray SDK only when `s3queue:traceCalls` asks (tracing.py): it was
42-49 % of either entry point's import, paid at every cold start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from s3queue.contract import tracing

ROOT = Path(__file__).resolve().parents[1]
LAYER = ROOT / "layers" / "s3queue" / "python"
ENTRIES = {"worker.app": ROOT / "functions", "app": ROOT / "functions" / "coordinator"}


def sdk_loaded(module: str, trace_calls: str | None) -> bool:
    """Import an entry point in a fresh interpreter, as Lambda does: is the SDK then loaded?"""
    env = {k: v for k, v in os.environ.items() if k != tracing.ENV_TRACE_CALLS}
    env["PYTHONPATH"] = os.pathsep.join([str(ENTRIES[module]), str(LAYER)])
    env["POWERTOOLS_TRACE_DISABLED"] = "true"  # no X-Ray daemon here
    if trace_calls is not None:
        env[tracing.ENV_TRACE_CALLS] = trace_calls
    code = f"import sys, {module}; print('aws_xray_sdk' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "True"


@pytest.mark.parametrize("module", sorted(ENTRIES))
def test_an_entry_point_imports_the_xray_sdk_only_when_asked(module: str) -> None:
    assert not sdk_loaded(module, None)
    assert not sdk_loaded(module, "0")
    assert sdk_loaded(module, "1")


def test_no_tracer_decorators_return_what_they_wrap() -> None:
    def handler(event: object, context: object) -> str:
        return "ran"

    none = tracing.NoTracer()
    assert none.capture_lambda_handler(handler) is handler
    assert none.capture_method(handler) is handler
    assert none.capture_method(capture_response=False)(handler) is handler
    none.put_annotation("ticket", "t")
    assert tracing.traces_calls({tracing.ENV_TRACE_CALLS: "true"})
    assert not tracing.traces_calls({tracing.ENV_TRACE_CALLS: ""})
    assert not tracing.traces_calls({})

"""What the Lambda functional tests share: loading the functions, a fake context, moto, EMF."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

FUNCTIONS = Path(__file__).resolve().parents[1] / "functions"
HANDLERS = FUNCTIONS / "handlers"
BUCKET = "queues"
ACCOUNT = "123456789012"


def load_worker_app() -> ModuleType:
    """``worker.app`` imported as Lambda does: the worker code root on sys.path."""
    if str(FUNCTIONS) not in sys.path:
        sys.path.insert(0, str(FUNCTIONS))
    # A Lambda container has one `handlers` package, the asset's: forget one a local test
    # loaded from another folder (the local loader names its folder `handlers`, as Lambda).
    package = sys.modules.get("handlers")
    if package is not None and list(getattr(package, "__path__", [])) != [str(HANDLERS)]:
        del sys.modules["handlers"]
        for name in [m for m in sys.modules if m.startswith("handlers.")]:
            origin = getattr(sys.modules[name], "__file__", None)
            if origin is not None and not Path(origin).is_relative_to(HANDLERS):
                del sys.modules[name]
    return importlib.import_module("worker.app")


def load_coordinator_app() -> ModuleType:
    """``app`` of the coordinator's own code root, under a name that cannot clash."""
    name = "coordinator_lambda_app"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FUNCTIONS / "coordinator" / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeContext:
    """A Lambda context: the attributes Powertools reads, and a remaining time."""

    remaining: Callable[[], int] = lambda: 60_000
    function_name: str = "S3Queue-worker"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e812345678"
    log_group_name: str = "/aws/lambda/S3Queue-worker"
    log_stream_name: str = "2026/01/01/[$LATEST]abcdef"
    invoked_function_arn: str = field(
        default=f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:S3Queue-worker"
    )

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining()


def scheduled_event() -> dict[str, Any]:
    """What EventBridge sends on a schedule rule."""
    return {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": "2026-01-01T12:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:{ACCOUNT}:rule/S3Queue-CoordinatorSchedule"],
        "detail": {},
    }


def object_created_event(key: str) -> dict[str, Any]:
    """What EventBridge sends for an S3 object created in a bucket with notifications on."""
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": ACCOUNT,
        "time": "2026-01-01T12:00:01Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{BUCKET}"],
        "detail": {
            "version": "0",
            "bucket": {"name": BUCKET},
            "object": {"key": key, "size": 120, "etag": "b1946ac92492d2347c6235b4d2611184"},
            "request-id": "57H08PA84AB1JZW0",
            "requester": ACCOUNT,
            "reason": "PutObject",
        },
    }


def moto_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto for S3 and Lambda (invokes answered without running anything); the bucket exists.

    A generator for a test module's fixture: ``yield from moto_aws(monkeypatch)``.
    """
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "s3queue",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("S3QUEUE_ENDPOINT_URL", raising=False)
    with mock_aws(config={"lambda": {"use_docker": False}}):
        import boto3

        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def restoring_logging() -> Iterator[None]:
    """Powertools logging on the ``s3queue`` logger during a Lambda test, and not after it.

    Powertools sets that logger's level and hides its records from the root handlers; both are
    undone afterwards so other tests log as before. Its handler stays (a second Logger of the
    same service reuses it) but writes to the current stdout.
    """
    target = logging.getLogger("s3queue")
    level = target.level
    root_filters = {id(h): list(h.filters) for h in logging.root.handlers}
    for handler in target.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stdout)
    if getattr(target, "powertools_handler", None):
        target.setLevel(logging.INFO)  # as Powertools set it when the function was imported
    yield
    target.setLevel(level)
    for handler in logging.root.handlers:
        if id(handler) in root_filters:
            handler.filters[:] = root_filters[id(handler)]


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def emf_metrics(text: str) -> list[dict[str, Any]]:
    """Every metric of the embedded-metric-format lines: name, unit, values, dimensions."""
    found = []
    for doc in json_lines(text):
        meta = doc.get("_aws")
        if not meta:
            continue
        for directive in meta["CloudWatchMetrics"]:
            dims = {d: doc[d] for group in directive["Dimensions"] for d in group}
            for metric in directive["Metrics"]:
                values = doc[metric["Name"]]
                found.append(
                    {
                        "namespace": directive["Namespace"],
                        "name": metric["Name"],
                        "unit": metric["Unit"],
                        "values": values if isinstance(values, list) else [values],
                        "dimensions": dims,
                    }
                )
    return found


def metric_total(metrics: list[dict[str, Any]], name: str) -> float:
    return sum(sum(m["values"]) for m in metrics if m["name"] == name)


def capture_logs(logger: Any) -> io.StringIO:
    """Send a Powertools logger's JSON lines to a buffer (its handler keeps the stdout it had)."""
    buffer = io.StringIO()
    logger.registered_handler.setStream(buffer)
    return buffer

"""Queue ``generate_report``: aggregate numbers into a summary report (count, total, mean, p95).

Body: ``{"values": [3, 1.5, 7]}``, or records and the field to aggregate:
``{"records": [{"amount": 3}, {"amount": 1.5}], "field": "amount"}``. Bad data raises
`ValueError`, which the queue retries with backoff and dead-letters after ``max_retries``.
The report is logged (its figures made readable by ``humanize``, a package of this folder's
``requirements.txt``: the deploy bundles it), returned, and written to
``$S3QUEUE_OUTBOX/<key>.report.json`` when that variable is set.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import humanize
from s3queue import Message

SETTINGS = {
    "visibility_timeout": 120,
    "max_retries": 3,
    "backoff_base": 5,
    "batch_size": 5,
    "concurrency": 2,
    "memory": 512,
    "timeout": 180,
}

OUTBOX_ENV = "S3QUEUE_OUTBOX"

logger = logging.getLogger(__name__)


def handle(message: Message) -> dict[str, float]:
    """Summarise the message's numbers; log, return and (optionally) write the report."""
    report = summarise(numbers(message.body))
    logger.info(
        "report for %s: %s values, total %s",
        message.id,
        humanize.intcomma(report["count"]),
        humanize.intcomma(report["total"], ndigits=2),
    )
    outbox = os.environ.get(OUTBOX_ENV)
    if outbox:
        directory = Path(outbox)
        directory.mkdir(parents=True, exist_ok=True)
        name = message.idempotency_key.replace(":", "_")
        partial = directory / f".{name}.report.json.partial"
        partial.write_text(json.dumps(report, sort_keys=True), encoding="utf-8")
        partial.replace(directory / f"{name}.report.json")
    return report


def numbers(body: Any) -> list[float]:
    """The finite numbers a body carries; `ValueError` for anything else."""
    if not isinstance(body, dict):
        raise ValueError(f"body must be a JSON object, got {type(body).__name__}")
    if "values" in body:
        items = body["values"]
    elif "records" in body and isinstance(body.get("field"), str):
        records = body["records"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError("records must be a list of objects")
        try:
            items = [record[body["field"]] for record in records]
        except KeyError as exc:
            raise ValueError(f"a record has no field {body['field']!r}") from exc
    else:
        raise ValueError('body needs "values", or "records" and "field"')
    if not isinstance(items, list) or not items:
        raise ValueError("nothing to aggregate: expected a non-empty list")
    bad = [item for item in items if not _is_number(item)]
    if bad:
        raise ValueError(f"not finite numbers: {bad[:5]!r}")
    return [float(item) for item in items]


def summarise(values: list[float]) -> dict[str, float]:
    """Count, total, mean and the nearest-rank 95th percentile of non-empty `values`."""
    ordered = sorted(values)
    total = math.fsum(ordered)
    rank = math.ceil(0.95 * len(ordered))
    return {
        "count": len(ordered),
        "total": total,
        "mean": total / len(ordered),
        "p95": ordered[rank - 1],
    }


def _is_number(item: Any) -> bool:
    return isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)

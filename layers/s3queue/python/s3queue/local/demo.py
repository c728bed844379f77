"""``s3queue demo``: the example queues end to end on an embedded S3 server, in seconds.

It enqueues every way there is (one by one, packed with ``enqueue_many``, a plain S3 PUT into
the inbox as another service would, delayed, by explicit id twice, in a group) plus one poison
message, runs the local runtime until every queue is drained, and prints what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from s3queue.contract.discovery import discover_handlers
from s3queue.local.console import Connection, ProgressLine, UsageError, print_summary
from s3queue.local.metering import RequestCounter
from s3queue.local.runtime import RunSummary, run_local

BUCKET = "s3queue-demo"
QUEUES = ("send_email", "generate_report")
SETTINGS = {"backoff_base": 0.2, "backoff_cap": 1.0}
"""Short retry delays so the poison message reaches the DLQ in about a second."""
OUTBOX = Path(".s3queue-dev/outbox")
OUTBOX_ENV = "S3QUEUE_OUTBOX"
PRICES = {"PUT": 0.005, "LIST": 0.005, "POST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
"""USD per 1,000 requests, S3 Standard in us-east-1; DELETE is free."""


def enqueue_mix(conn: Connection) -> dict[str, int]:
    """Put the demo's messages; how many each queue should complete."""
    emails, reports = conn.queue("send_email"), conn.queue("generate_report")
    say = print
    emails.enqueue({"to": "ada@example.com", "template": "welcome", "name": "Ada"})
    reset = {"to": "grace@example.com", "template": "password_reset", "name": "Grace"}
    emails.enqueue(reset, id="reset-grace-1")
    emails.enqueue(reset, id="reset-grace-1")  # a retried enqueue: no duplicate
    emails.enqueue({"to": "linus@example.com", "template": "welcome", "name": "Linus"}, delay=2)
    key = f"{emails.keys.inbox}signup-service-0001.json"
    body = {"to": "barbara@example.com", "template": "welcome", "name": "Barbara"}
    conn.client.put_object(
        Bucket=conn.bucket, Key=key, Body=json.dumps(body).encode(), ContentType="application/json"
    )
    say("send_email:      1 enqueue, 1 enqueued twice with id reset-grace-1, 1 delayed 2 s,")
    say(f"                 1 plain S3 PUT to s3://{conn.bucket}/{key}")
    rng = random.Random(7)
    batch = [{"values": [round(rng.uniform(1, 100), 2) for _ in range(8)]} for _ in range(20)]
    reports.enqueue_many(batch)
    for month in ("2024-01", "2024-02", "2024-03"):
        records = [{"amount": rng.randint(10, 500)} for _ in range(5)]
        reports.enqueue({"records": records, "field": "amount", "month": month}, group="acme")
    poison = reports.enqueue({"values": []})
    say("generate_report: 20 packed into one object by enqueue_many, 3 in order in group acme,")
    say(f"                 1 poison message {poison} (no values: fails every attempt)")
    return dict(zip(QUEUES, (4, 23), strict=True))


def requests_line(counts: dict[str, int]) -> str:
    used = {kind: n for kind, n in counts.items() if n}
    cost = sum(PRICES.get(kind, 0.0) * n / 1000 for kind, n in used.items())
    listed = ", ".join(f"{n} {kind}" for kind, n in used.items())
    return f"S3 requests: {listed} (about ${cost:.4f} at S3 Standard list prices)"


def check(summary: RunSummary, expected: dict[str, int]) -> list[str]:
    """What differs from the expected outcome (empty when the demo went as it should)."""
    problems = [] if summary.drained else ["the queues were not drained in time"]
    for name, count in expected.items():
        done = summary.queues[name].processed
        if done != count:
            problems.append(f"{name}: {done} messages completed, expected {count}")
    dead = [e for entries in summary.dead_letters.values() for e in entries]
    if len(dead) != 1:
        problems.append(f"{len(dead)} dead letters, expected 1 (the poison message)")
    return problems


def run_demo(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    """The whole demo; exit code 0 when everything ended as expected."""
    settings = {**SETTINGS, **overrides}
    missing = set(QUEUES) - set(discover_handlers(args.handlers))
    if missing:
        raise UsageError(f"the demo needs handler modules {sorted(missing)} in {args.handlers}")
    with ExitStack() as stack:
        if not args.endpoint_url:
            print("Starting an embedded S3 server (SeaweedFS)...")
        conn = Connection.open_or_embed(args, stack, data_dir=None, bucket=BUCKET)
        taken = set(conn.queues()) & set(QUEUES)
        if taken:
            raise UsageError(
                f"bucket {conn.bucket} already holds queues {sorted(taken)}: "
                "run the demo on an empty bucket"
            )
        print(f"S3 endpoint {conn.client.meta.endpoint_url}, bucket {conn.bucket}\n")
        counter = RequestCounter.attach(conn.client)
        _fresh_outbox()
        expected = enqueue_mix(conn)
        print(f"\nRunning {args.workers} workers with {settings} until drained...")
        line = ProgressLine(sys.stdout)
        summary = run_local(
            args.handlers,
            bucket=conn.bucket,
            s3=conn.client,
            workers=args.workers,
            drain=True,
            prefix=conn.prefix,
            overrides=settings,
            progress=line.update,
            timeout=120,
        )
        line.close()
        print_summary(summary, sys.stdout)
        print(requests_line(counter.counts()))
        files = sorted(p.name for p in OUTBOX.iterdir() if not p.name.startswith("."))
        print(f"Handlers wrote {len(files)} files to {OUTBOX}/ (e-mails and reports)")
    problems = check(summary, expected)
    for problem in problems:
        print(f"demo: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _fresh_outbox() -> None:
    """Empty the demo's outbox of earlier runs' files and point the handlers at it."""
    OUTBOX.mkdir(parents=True, exist_ok=True)
    for pattern in ("*.eml", "*.report.json"):
        for old in OUTBOX.glob(pattern):
            old.unlink()
    os.environ[OUTBOX_ENV] = str(OUTBOX.resolve())

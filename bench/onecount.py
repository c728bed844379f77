"""Requests per message of one local process (issue 22 item 5): ``python -m bench.onecount``.

One `run_local` with 4 worker threads drains 200 single `enqueue`s on an embedded SeaweedFS,
`--runs` times, each on a queue of its own. The runtime's requests are counted at its client's
``before-send`` event (the lean path of the hot calls emits it too), by HTTP method (a LIST is
a GET with ``list-type``); the producers' PUTs are added as one a message. The drain's end is
seen from events (`bench.local.Tracker`), so no drain check adds requests.
"""

from __future__ import annotations

import argparse
import collections
import json
import threading
from typing import Any

from s3queue.local.seaweed import ANY_CREDENTIALS, EmbeddedS3
from s3queue.producing.producer import Queue
from s3queue.storage.clients import make_client
from s3queue.storage.s3 import S3Storage

from bench.local import LocalRun, Tracker, noop

BUCKET = "bench-onecount"


def drain(endpoint: str, queue: str, messages: int, workers: int) -> dict[str, Any]:
    """One drain: requests by kind and per message."""
    tracker = Tracker()
    producer = S3Storage(make_client(endpoint, credentials=ANY_CREDENTIALS), BUCKET)
    q = Queue(queue, storage=producer, prefix="bench", listener=tracker)
    for i in range(messages):
        q.enqueue({"n": i})
    client = make_client(endpoint, credentials=ANY_CREDENTIALS)
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def count(request: Any, **_: Any) -> None:
        with lock:
            counts["LIST" if "list-type" in request.url else request.method] += 1

    client.meta.events.register("before-send.s3", count)
    tracker.expect(messages)
    run = LocalRun(
        S3Storage(client, BUCKET), queue, noop, prefix="bench", workers=workers, listener=tracker
    )
    with run.running():
        drained = tracker.wait(120)
    total = sum(counts.values())
    return {
        "drained": drained,
        "requests": dict(counts),
        "runtime_per_message": round(total / messages, 3),
        "with_enqueue_put": round(total / messages + 1, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.onecount", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    server = EmbeddedS3(buckets=[BUCKET]).start()
    try:
        for run in range(args.runs):
            found = drain(server.endpoint_url, f"one{run}", args.messages, args.workers)
            print(json.dumps(found), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

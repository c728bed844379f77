"""``python -m bench.processcount OUT.json TREE [TREE...]``: where three processes' requests go.

The `bench.hiding` comparison of processes (one ``s3queue dev --drain`` alone, then with two
``s3queue worker --drain``, 4 threads each, single messages, a handler that waits
``--io-ms``, AWS-like delays through `bench.delay`'s proxy), with the code of each checkout
`TREE` in turn, interleaved (A 1, A 3, B 1, B 3, A 1, ...), `--pairs` times. Besides the
proxy's counts by kind it reports each process's storage calls by thread role, call, key kind
and outcome (`bench.processcountchild`), so an extra request per message can be traced to its
source (issue 22, item 4; docs/performance.md, session 12). Run it with this checkout first on
``PYTHONPATH``; each child runs with its own `TREE`'s code.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage

from bench.delay import AWS_LIKE, DelayProxy
from bench.drainrate import processes as steady_of_processes
from bench.hiding import QUEUE, WAITING
from bench.measure import enqueue_all, per_message
from bench.pool import _env
from bench.target import Target

CHILD = Path(__file__).with_name("processcountchild.py")


def _command(
    out: Path, url: str, bucket: str, prefix: str, n: int, handlers: Path, threads: int
) -> list[str]:
    """The `n`-th process: the first a ``dev``, the others ``worker``s."""
    role = "worker" if n else "dev"
    return [
        *(sys.executable, str(CHILD), str(out), "--endpoint-url", url, "--bucket", bucket),
        *("--prefix", prefix, role, "--drain", "--handlers", str(handlers)),
        *("--workers", str(threads)),
    ]


def _drain(tree: Path, target: Target, handlers: Path, count: int, args: Any) -> dict[str, Any]:
    space = target.space(f"count{count}")
    producer = Queue(QUEUE, storage=S3Storage(target.client(), space.bucket), prefix=space.prefix)
    enqueue_all(producer, args.messages)
    env = {**_env(target), "PYTHONPATH": f"{tree}/layers/s3queue/python:{tree}"}
    with DelayProxy(target.endpoint_url, AWS_LIKE) as proxy, tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"{n}.json" for n in range(count)]
        proxy.counts(reset=True)
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                _command(out, proxy.url, space.bucket, space.prefix, n, handlers, args.threads),
                env=env,
                cwd=tree,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n, out in enumerate(outs)
        ]
        codes = [proc.wait() for proc in procs]
        elapsed = time.monotonic() - started
        counts = proxy.counts()
        times = [json.loads(out.read_text()) if out.exists() else {} for out in outs]
        calls = [json.loads(Path(f"{out}.calls").read_text()) for out in outs]
    return {
        "tree": str(tree),
        "processes": count,
        "messages_per_s": round(args.messages / elapsed, 1),
        **steady_of_processes(times),
        "per_message": per_message(counts, args.messages),
        "calls": calls,
        "exit_codes": codes,
    }


def report(runs: list[dict[str, Any]], messages: int) -> None:
    """Per tree: the 3 / 1 ratios pair by pair, requests per message by kind, and the calls
    per message by source (mean over the runs, each process's summed)."""
    trees = dict.fromkeys(run["tree"] for run in runs)
    for tree in trees:
        mine = [run for run in runs if run["tree"] == tree]
        ones, threes = ([r for r in mine if r["processes"] == n] for n in (1, 3))
        pairs = zip(ones, threes, strict=True)
        ratios = [three["messages_per_s"] / one["messages_per_s"] for one, three in pairs]
        print(f"{tree}: 3 / 1 start to end {[round(r, 2) for r in ratios]}")
        for runs_of in (ones, threes):
            kinds = collections.defaultdict(list)
            for run in runs_of:
                for kind, value in run["per_message"].items():
                    kinds[kind].append(value)
            line = " ".join(f"{k} {statistics.median(v):.3f}" for k, v in kinds.items())
            print(f"  {runs_of[0]['processes']}: {[r['messages_per_s'] for r in runs_of]} msg/s")
            print(f"     requests/msg (median) {line}")
            sources: collections.Counter[str] = collections.Counter()
            for run in runs_of:
                for calls in run["calls"]:
                    for *key, n in calls:
                        sources[" ".join(key)] += n / messages / len(runs_of)
            for source, value in sources.most_common():
                if value >= 0.005:
                    print(f"     {value:.3f} {source}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=4_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--io-ms", type=int, default=20)
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    with Target() as target, tempfile.TemporaryDirectory() as folder:
        handlers = Path(folder) / "handlers"
        handlers.mkdir()
        (handlers / f"{QUEUE}.py").write_text(WAITING.format(s=args.io_ms / 1000))
        for _ in range(args.pairs):
            for tree in args.trees:
                for count in (1, 3):
                    runs.append(_drain(tree.resolve(), target, handlers, count, args))
                    print(tree, count, runs[-1]["messages_per_s"], runs[-1]["per_message"])
                    args.out.write_text(json.dumps(runs, indent=1))
    report(runs, args.messages)


if __name__ == "__main__":
    main()

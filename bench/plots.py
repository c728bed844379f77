"""The PNG figures of a run (matplotlib, Agg backend): one per scenario that has a picture."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # the backend is chosen first
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench import simreport

Results = dict[str, Any]
KIND_COLORS = {"PUT": "#d62728", "LIST": "#ff7f0e", "GET": "#1f77b4", "DELETE": "#7f7f7f"}


def write_all(out: Path, results: Results) -> list[Path]:
    """Every figure whose scenario ran; their paths."""
    written = []
    for name, draw in FIGURES:
        data = results["scenarios"].get(name)
        if not data or "error" in data:
            continue
        figure = draw(data)
        path = out / f"{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _throughput(data: Results) -> Figure:
    points = data["points"]
    labels = [str(p["workers"]) for p in points]
    x = range(len(points))
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(
        [i - 0.2 for i in x],
        [p["ceiling_ops_per_s"] for p in points],
        0.4,
        label="ceiling (raw PUT/GET/LIST/DELETE)",
        color="#bbbbbb",
    )
    left.bar(
        [i + 0.2 for i in x],
        [p["s3_ops_per_s"] for p in points],
        0.4,
        label="the runtime",
        color="#1f77b4",
    )
    _axes(left, "S3 operations per second", labels)
    left.legend(fontsize=8)
    right.bar(list(x), [p["messages_per_s"] for p in points], 0.5, color="#2ca02c")
    for i, p in enumerate(points):
        right.annotate(
            f"{p['fraction_of_ceiling']:.0%} of ceiling",
            (i, p["messages_per_s"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    _axes(right, f"messages per second ({data['params']['messages']:,} messages)", labels)
    figure.suptitle("Throughput of the local runtime by worker count")
    figure.tight_layout()
    return figure


def _axes(axes: Axes, title: str, labels: list[str]) -> None:
    axes.set_title(title, fontsize=10)
    axes.set_xticks(range(len(labels)), labels)
    axes.set_xlabel("workers")
    axes.grid(axis="y", alpha=0.3)


def _latency(data: Results) -> Figure:
    figure, axes = plt.subplots(figsize=(7, 4))
    for name in ("steady", "backlog"):
        samples = sorted(data[name].get("samples_ms", []))
        if samples:
            fractions = [(i + 1) / len(samples) for i in range(len(samples))]
            axes.step(samples, fractions, where="post", label=f"{name} (n={len(samples)})")
    axes.set_xscale("log")
    axes.set_xlabel("enqueue to handler start, ms (log)")
    axes.set_ylabel("fraction of messages")
    axes.set_title("Latency CDF, local runtime")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    return figure


def _cost(data: Results) -> Figure:
    modes = data["modes"]
    labels = [m["mode"].replace("enqueue_many", "many") for m in modes]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / (len(KIND_COLORS) + 1)
    series = {**KIND_COLORS, "total": "#000000"}
    for n, (kind, color) in enumerate(series.items()):
        values = [m["per_message"][kind] for m in modes]
        offsets = [i - 0.4 + width * (n + 0.5) for i in range(len(modes))]
        left.bar(offsets, values, width, label=kind, color=color)
    left.set_xticks(range(len(modes)), labels)
    left.set_yscale("log")
    left.set_title("S3 requests per message, by kind (log)", fontsize=10)
    left.legend(fontsize=7, ncol=2)
    right.bar(labels, [m["usd_per_million"] for m in modes], color="#9467bd")
    for name, usd in data["sqs"].items():
        right.axhline(usd, linestyle="--", color="#444444", linewidth=1)
        right.annotate(
            f"SQS {name} ${usd:.2f}", (len(modes) - 0.6, usd), fontsize=7, ha="right", va="bottom"
        )
    right.set_yscale("log")
    right.set_title("S3 $ per million messages (log)", fontsize=10)
    for axes in (left, right):
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return figure


def _idle(data: Results) -> Figure:
    timeline = data["local"]["timeline"]
    figure, axes = plt.subplots(figsize=(9, 3.5))
    times = [t for t, _ in timeline[1:]]
    rates = [(b - a) / (t2 - t1) for (t1, a), (t2, b) in itertools.pairwise(timeline)]
    axes.plot(times, rates, color="#ff7f0e", linewidth=1)
    for mark in data["local"]["message_marks_s"]:
        axes.axvline(mark, color="#2ca02c", linestyle="--", linewidth=1)
    axes.set_xlabel("seconds since the runtime started (dashed: one message enqueued)")
    axes.set_ylabel("S3 requests per second")
    axes.set_title("Local runtime, one idle queue: polling over time")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _scale(data: Results) -> Figure:
    points = data["points"]
    sizes = [p["backlog"] for p in points]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, marker in (("dispatch", "o"), ("saturated", "s")):
        left.plot(
            sizes,
            [p["summary"][kind]["requests_total"] for p in points],
            marker=marker,
            label=f"{kind} tick",
        )
        right.plot(
            sizes,
            [p["summary"][kind]["median_ms"] for p in points],
            marker=marker,
            label=f"{kind} tick",
        )
    left.set_title("S3 requests per tick", fontsize=10)
    right.set_title("milliseconds per tick (median)", fontsize=10)
    for axes in (left, right):
        axes.set_xscale("log")
        axes.set_xlabel("pending messages (log)")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle("Coordinator tick cost against the backlog")
    figure.tight_layout()
    return figure


FIGURES: list[tuple[str, Callable[[Results], Figure]]] = [
    ("throughput", _throughput),
    ("latency", _latency),
    ("cost", _cost),
    ("idle", _idle),
    ("scale", _scale),
    ("aws_sim", simreport.figure),
]

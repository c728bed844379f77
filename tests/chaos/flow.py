"""Flow control in a chaos run: an operator who pauses and resumes the queue, and the check
that a paused queue dispatched nothing new.

The operator (`pauser`) pauses the queue `count` times while the producer runs, each time for
a while, then resumes it; a switch that raised (an S3 fault) may or may not have applied, so
it is tried again until it answers, and the queue always ends resumed. It records:

    pause_done      after `Queue.pause` returned: from here on the queue is paused
    resume_start    before `Queue.resume` is called: until here it still is

Each process's LIST of tickets, which shows the controls document (``tickets/~controls``: the
gate GETs it when its ETag changed), is recorded before the request can leave
(``controls_read``) and once its answer came (``controls_seen``, both by `ProcessStorage.list`);
so is the gate's GET of the document, which its tick then goes by (`ProcessStorage.get`: it can
come well after the LIST, and after a resume began; the SeaweedFS chaos run found that a check
of the LIST alone flags such a tick). A read after ``pause_done`` and seen before the next
``resume_start`` began after the pause applied and ended before the resume began: on strongly
consistent storage it read "paused". (One that a frozen process sends after the resume began is
not: the chaos suite found that the first version of this check said so.)

Invariant ``paused_dispatch``: no process publishes a ticket (``dispatch``) after such a read
and before its next one; and, in a run with pauses, none dispatches before it ever read the
controls.
"""

from __future__ import annotations

from collections.abc import Callable

from s3queue.errors import S3QueueError
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys

from chaos.actors import PREFIX, QUEUE, Actor, Role, World
from chaos.history import Entry
from chaos.report import Report

KEYS = QueueKeys(PREFIX, QUEUE)
SWITCH_RETRY_S = 0.5


def pauser(
    world: World, role: Role, count: int, pause_s: tuple[float, float], spread_s: float
) -> Callable[[Actor], None]:
    """The operator's body: `count` pauses of `pause_s` seconds, spread over `spread_s`."""

    def body(actor: Actor) -> None:
        storage, clock = world.process(actor, role, role.name)
        queue = Queue(QUEUE, storage=storage, clock=clock)
        for _ in range(count):
            actor.sleep(actor.rng.uniform(0, spread_s / max(count, 1)))
            _switch(world, actor, role, queue.pause, "pause")
            world.history.record("pause_done", role.name)
            actor.sleep(actor.rng.uniform(*pause_s))
            world.history.record("resume_start", role.name)
            _switch(world, actor, role, queue.resume, "resume")

    return body


def _switch(world: World, actor: Actor, role: Role, flip: Callable[[], None], what: str) -> None:
    while True:
        try:
            flip()
            return
        except S3QueueError as exc:
            world.history.record(f"{what}_error", role.name, error=f"{type(exc).__name__}: {exc}")
            actor.sleep(SWITCH_RETRY_S)


def check_rate(entries: list[Entry], limit: int, skew_ms: int, report: Report) -> None:
    """Invariant ``rate_limit``: no second (a window of `dispatching.limits`) saw more handler
    starts than the limit. Judged by each start as its worker records it
    (``handler_start``, on the reference clock); with skewed clocks a start may be recorded
    in a neighbour's second, so runs with skew are not judged (the workers keep the windows by
    their own clocks)."""
    if not limit or skew_ms:
        return
    per_second: dict[int, int] = {}
    for e in entries:
        if e.kind == "handler_start":
            second = e.true_ms // 1000
            per_second[second] = per_second.get(second, 0) + 1
    for second, starts in sorted(per_second.items()):
        if starts > limit:
            report.add("rate_limit", f"second {second}", f"{starts} handler starts > {limit}")


def check_pauses(entries: list[Entry], report: Report) -> None:
    """Invariant ``paused_dispatch`` (module docstring); a run the operator never paused has
    nothing to check (hand-made histories have no reads of the controls)."""
    if not any(e.kind == "pause_done" for e in entries):
        return
    pause: int | None = None
    """The pause in force (its number), None while resumed."""
    count = 0
    started: dict[str, int | None] = {}
    """process -> the pause in force when its LIST of tickets in progress began."""
    last_read: dict[str, bool] = {}
    """process -> whether its last LIST of tickets ran wholly inside one pause."""
    for e in entries:
        if e.kind == "pause_done":
            count += 1
            pause = count
        elif e.kind == "resume_start":
            pause = None
        elif e.kind == "controls_read":
            started[e.actor] = pause
        elif e.kind == "controls_seen":
            began = started.pop(e.actor, None)
            last_read[e.actor] = began is not None and began == pause
        elif e.kind == "dispatch":
            seen = last_read.get(e.actor)
            if seen is None:
                report.add("paused_dispatch", str(e["ticket"]), f"{e.actor} never read controls")
            elif seen:
                report.add("paused_dispatch", str(e["ticket"]), f"{e.actor} read it paused")


def _partition(ref: str) -> str:
    return KEYS.partition_of(ref) or ""


def _messages(ref: str) -> int:
    parsed = KEYS.owning(ref).parse_msg(ref)
    return parsed.count if parsed is not None else 1


def check_partition_rate(entries: list[Entry], limit: int, skew_ms: int, report: Report) -> None:
    """Invariant ``partition_rate_limit``: no second saw more handler starts of one partition
    than the limit (judged as ``rate_limit`` is; a start's partition is its ref's)."""
    if not limit or skew_ms:
        return
    per_second: dict[tuple[str, int], int] = {}
    for e in entries:
        if e.kind == "handler_start" and "ref" in e.fields:
            at = (_partition(e["ref"]), e.true_ms // 1000)
            per_second[at] = per_second.get(at, 0) + 1
    for (partition, second), starts in sorted(per_second.items()):
        if starts > limit:
            where = f"partition {partition or '(default)'}, second {second}"
            report.add("partition_rate_limit", where, f"{starts} handler starts > {limit}")


def check_partition_concurrency(entries: list[Entry], cap: int, report: Report) -> None:
    """Invariant ``partition_concurrency``: when a ticket is dispatched, the messages of its
    partition in live tickets (dispatched, not yet deleted) are at most the cap, unless the
    ticket is its partition's only one (a packed object larger than the cap goes alone)."""
    if not cap:
        return
    live: dict[str, tuple[str, int]] = {}
    """ticket -> (its partition, its messages)"""
    for e in entries:
        if e.kind == "ticket_delete":
            live.pop(e["ticket"], None)
        elif e.kind == "dispatch" and e["refs"]:
            partition = _partition(e["refs"][0])
            live[e["ticket"]] = (partition, sum(_messages(ref) for ref in e["refs"]))
            mine = [count for p, count in live.values() if p == partition]
            if len(mine) > 1 and sum(mine) > cap:
                where = f"partition {partition or '(default)'}, ticket {e['ticket']}"
                report.add("partition_concurrency", where, f"{sum(mine)} in flight > {cap}")

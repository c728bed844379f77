"""The message mix of a chaos run, its handler, and what must become of each message.

Every body is ``{"n": <number>, "kind": <kind>, ...}``; the handler behaves by kind:

    ok         returns after a short while
    flaky      raises on its first `fails` attempts, then succeeds
    poison     always raises: must reach the DLQ after exactly max_retries retries
    permanent  raises PermanentError: must reach the DLQ at once
    slow       takes 1.5 x the visibility timeout (heartbeats, if any, must keep it)
    killer     outlives the Lambda timeout: the runtime kills its process, every time
    dedup      enqueued twice with one explicit id: must run as one message (with the
               "seams" steps below, it may fail first, die, or be sent as a file)

A share of the messages, of every kind but dedup, also belongs to a FIFO group (``g1``,
``g2``, ..., about `Mix.group_size` messages each): a group's failures, poison, Lambda killers
and slow ones hold up the rest of their group. Every message goes to one of
`Mix.partitions` (the default one, ``p1``, ``p2``), recorded in its body as ``p``: a handler
that sees another partition records ``wrong_partition``; a group lives inside its partition.

And foreign objects in the inbox: empty, binary, invalid JSON (all reach the handler as bytes),
one larger than ``max_message_bytes`` (a stored payload: ``body`` None, handled as the raw ones),
a garbage ``msg/`` object (a dead letter); and one plain PUT into a partition's inbox folder
and one into a partition's own folder.

The *seams* steps (off unless the mix asks, issue 19): an explicit id enqueued again at any
point of its message's life, also after it was handled or died (`Mix.resend_ids`); explicit-id
messages that fail first (`dedup_fails`, so they move to retry copies) or die (`dedup_dies`);
a DLQ redriven by the operator mid-run (`redrives`, ungrouped dead letters, one at a time as a
per-id redrive would); messages sent through `enqueue_file` (`files`: a payload upload, then
the record) and through `batching()` (`batched`); keys another service PUTs again, each
version a message of its own (`reputs`).
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.schedules import SLOT_ATTRIBUTE
from s3queue.errors import PermanentError, S3QueueError
from s3queue.message import Message
from s3queue.operations import admin
from s3queue.producing.batching import GroupCommit
from s3queue.producing.producer import Queue
from s3queue.protocol.records import foreign_id

from chaos.history import History
from chaos.process import Crash

KINDS = ("ok", "flaky", "poison", "permanent", "slow", "killer", "dedup")


@dataclass(frozen=True)
class Mix:
    """Fractions of each kind (the rest is ok), packing, and the foreign objects."""

    flaky: float = 0.12
    poison: float = 0.04
    permanent: float = 0.02
    slow: float = 0.01
    killer: float = 0.005
    dedup: float = 0.04
    grouped: float = 0.3
    """Share of messages (of any kind but dedup) sent with a FIFO group."""
    group_size: int = 8
    """Messages per group, on average (at least 3 groups)."""
    packed: float = 0.4
    """Share of messages sent with `enqueue_many`, in packs of 2-12."""
    partitions: tuple[str | None, ...] = (None, "p1", "p2")
    """The partitions messages are sent into, one drawn at random for each."""
    prioritized: float = 0.2
    """Share of ungrouped messages sent with a priority (3 or 9: few lanes, so a lane's
    backlog still grows its tickets)."""
    malformed: bool = True
    ok_ms: tuple[int, int] = (10, 400)
    resend_ids: float = 0.0
    """Per batch sent (and per later round), how many earlier explicit ids are enqueued again
    on average (mostly recent ones): while pending, running, being applied, retried, handled
    or dead."""
    resend_rounds: int = 0
    """Rounds after the last batch, each `spread_s / 10` apart: resends and redrives then."""
    dedup_fails: int = 0
    """Explicit-id messages fail up to this many times first (retry copies move their marker)."""
    dedup_dies: float = 0.0
    """Share of explicit-id messages that raise PermanentError (dead, then maybe redriven)."""
    redrives: float = 0.0
    """Per later round, the chance that the operator redrives the DLQ's ungrouped entries."""
    files: float = 0.0
    """Share of ungrouped single messages (explicit ids too) sent with `enqueue_file`."""
    batched: float = 0.0
    """Share of ungrouped single messages without an id sent through `batching()`."""
    reputs: float = 0.0
    """Per batch, the chance that another service PUTs a new version of one of `REPUT_KEYS`
    (an inbox key or a foreign ``msg/`` name): each version is a message of its own."""
    purges: float = 0.0
    """The chance that the operator purges the queue once, halfway through the batches, while
    it runs (issue 19): what was acknowledged before the purge ended may be gone."""

    @property
    def seams(self) -> bool:
        return bool(self.resend_ids or self.redrives or self.files or self.batched)

    def kind(self, rng: random.Random) -> str:
        draw, edge = rng.random(), 0.0
        for kind in KINDS[1:]:
            edge += getattr(self, kind)
            if draw < edge:
                return kind
        return "ok"


REPUT_KEYS = ("inbox/again-0.json", "inbox/again-1.json", "msg/again-2.json")
"""Keys another service PUTs again and again (`Mix.reputs`)."""


@dataclass(frozen=True)
class Spec:
    n: int
    kind: str
    body: dict[str, Any]
    group: str | None = None
    partition: str | None = None
    priority: int = 0


def plan(count: int, mix: Mix, settings: QueueSettings, seed: int) -> list[Spec]:
    """`count` message specs, reproducibly."""
    rng = random.Random(f"{seed}:workload")
    spread = random.Random(f"{seed}:partitions")
    ranks = random.Random(f"{seed}:priorities")  # its own stream: the rest of the plan as before
    groups = max(3, round(count * mix.grouped / max(mix.group_size, 1)))
    specs = []
    for n in range(count):
        kind = mix.kind(rng)
        body: dict[str, Any] = {"n": n, "kind": kind, "ms": rng.randint(*mix.ok_ms)}
        if kind == "flaky":
            body["fails"] = rng.randint(1, max(settings.max_retries, 1))
        elif kind == "slow":
            body["ms"] = round(settings.visibility_timeout * 1500)
        elif kind == "killer":
            body["ms"] = round(settings.timeout * 1000 + 1000)
        # Explicit ids stay out of groups while bug L is open (test_core_bugs.py): an explicit
        # id loses its place among enqueues of the same millisecond.
        grouped = rng.random() < mix.grouped and kind != "dedup"
        group = f"g{rng.randint(1, groups)}" if grouped else None
        # A group lives inside one partition; its own stream of draws keeps the rest of the
        # plan as it was before partitions.
        partition = mix.partitions[int(group[1:]) % len(mix.partitions)] if group else None
        if group is None:
            partition = spread.choice(mix.partitions)
        body["p"] = partition
        ranked = group is None and ranks.random() < mix.prioritized
        priority = ranks.choice((3, 9)) if ranked else 0
        specs.append(Spec(n, kind, body, group, partition, priority))
    if mix.seams:
        _seams(specs, mix, random.Random(f"{seed}:seams"))
    return specs


def _seams(specs: list[Spec], mix: Mix, rng: random.Random) -> None:
    """The seams steps' draws (module docstring), from a stream of their own: the rest of the
    plan stays as it was without them."""
    for spec in specs:
        if spec.kind == "dedup":
            spec.body["fails"] = rng.randint(0, mix.dedup_fails)
            spec.body["dies"] = rng.random() < mix.dedup_dies
        if spec.group is None and spec.kind in ("ok", "dedup"):
            draw = rng.random()
            spec.body["via"] = (
                "file"
                if draw < mix.files
                else "batch"
                if draw < mix.files + mix.batched and spec.kind == "ok"
                else None
            )


@dataclass
class Expected:
    """What the run must end with (filled in as the producer's enqueues are acknowledged)."""

    poison: set[str] = field(default_factory=set)
    dead_at_once: set[str] = field(default_factory=set)
    maybe_dead: set[str] = field(default_factory=set)
    """Dead at once if it exists: its put raised, and may have applied all the same."""
    total: int = 0


class Producer:
    """Enqueues specs through a `Queue` and records what was acknowledged."""

    def __init__(self, queue: Queue, history: History, expected: Expected, rng: random.Random):
        self.queue, self.history, self.expected, self.rng = queue, history, expected, rng
        self.explicit: list[Spec] = []
        """Explicit-id specs sent so far: what `resend` draws from."""
        self.redriving = False
        """A redrive began and has not finished (its process died, or S3 failed it)."""
        self.versions: dict[int, int] = {}
        """`REPUT_KEYS` index -> the last version PUT."""
        self.batch: GroupCommit | None = None
        """Made on first use: its condition comes from the clock (the simulation's, in a run)."""

    def send(self, specs: list[Spec], mix: Mix) -> None:
        """One batch: packed if the mix says so and it can be, else one enqueue each."""
        plain = [
            s for s in specs if s.kind != "dedup" and s.group is None and not s.body.get("via")
        ]
        if len(plain) > 1 and self.rng.random() < mix.packed:
            for lane in dict.fromkeys((s.partition, s.priority) for s in plain):
                self._many([s for s in plain if (s.partition, s.priority) == lane])
            specs = [s for s in specs if s not in plain]
        for spec in specs:
            self._one(spec)
        if mix.resend_ids:
            self.resend_some(mix.resend_ids)
        if mix.reputs and self.rng.random() < mix.reputs:
            self.put_again(self.rng.randrange(len(REPUT_KEYS)))

    def _many(self, specs: list[Spec]) -> None:
        try:
            first = specs[0]
            ids = self.queue.enqueue_many(
                [s.body for s in specs], partition=first.partition, priority=first.priority
            )
        except S3QueueError as exc:
            self.history.record(
                "enqueue_failed", "producer", ns=[s.n for s in specs], error=str(exc)
            )
            return
        for spec, message_id in zip(specs, ids, strict=True):
            self._acked(spec, message_id)

    def _one(self, spec: Spec) -> None:
        explicit = f"dedup-{spec.n}" if spec.kind == "dedup" else None
        if explicit is not None:
            # Recorded before the first PUT: an explicit id is exactly-once, whatever happens
            # to its enqueues (the checker never excuses its duplicates as a resent PUT).
            self.history.record("explicit_id", "producer", id=explicit)
            self.explicit.append(spec)
            if spec.body.get("dies"):  # dead at once if it exists, acknowledged or not
                self.expected.maybe_dead.add(explicit)
        acked = False
        for _ in range(2 if explicit else 1):  # a dedup message is sent twice
            try:
                message_id = self._put(spec, explicit)
            except S3QueueError as exc:
                self.history.record("enqueue_failed", "producer", ns=[spec.n], error=str(exc))
                continue
            if not acked:
                self._acked(spec, message_id)
                acked = True

    def _put(self, spec: Spec, explicit: str | None) -> str:
        """One enqueue of `spec`, the way its plan says (`via`)."""
        via = spec.body.get("via")
        if via == "file":
            data = io.BytesIO(json.dumps(spec.body).encode())
            return self.queue.enqueue_file(data, id=explicit, partition=spec.partition)
        if via == "batch":
            self.batch = self.batch or self.queue.batching(window=0)
            return self.batch.enqueue(spec.body, partition=spec.partition)
        return self.queue.enqueue(
            spec.body,
            id=explicit,
            group=spec.group,
            partition=spec.partition,
            priority=spec.priority,
        )

    def put_again(self, index: int) -> None:
        """Another service PUTs the next version of one of `REPUT_KEYS` (plain, unconditional):
        recorded with its version (`n`) once stored, as a message of its own."""
        name = REPUT_KEYS[index]
        self.versions[index] = version = self.versions.get(index, 0) + 1
        n = 900_000 + index * 1000 + version
        body = {"n": n, "kind": "ok", "ms": 20, "p": None, "ver": version}
        message_id = foreign_id(name)
        try:
            self.queue.storage.put(self.queue.keys.root + name, json.dumps(body).encode())
        except (S3QueueError, Crash) as exc:  # it may have landed: a version of its own
            self.history.record(
                "enqueue_failed", "producer", ns=[n], reput=message_id, error=str(exc)
            )
            if isinstance(exc, Crash):
                raise
            return
        self.history.record(
            "put_foreign", "producer", id=message_id, key=self.queue.keys.root + name, n=n
        )
        self.expected.total += 1

    def resend_some(self, rate: float) -> None:
        """`rate` resends on average: its whole part, and one more with its fraction's chance."""
        for _ in range(int(rate) + (self.rng.random() < rate % 1)):
            self.resend()

    def resend(self) -> None:
        """Enqueue an earlier explicit id again, wherever its message is in its life (a recent
        one three times in four: its message is likely running, retried or being applied)."""
        if not self.explicit:
            return
        recent = self.explicit[-6:] if self.rng.random() < 0.75 else self.explicit
        spec = self.rng.choice(recent)
        self.history.record("resend", "producer", id=f"dedup-{spec.n}")
        try:
            self._put(spec, f"dedup-{spec.n}")
        except S3QueueError as exc:
            self.history.record("enqueue_failed", "producer", ns=[spec.n], error=str(exc))

    def purge(self) -> None:
        """The operator purges the queue mid-run; recorded before it starts and when it ends
        (killed midway too: whatever it had listed may be gone)."""
        self.history.record("purge_started", "producer")
        count, error = None, None
        try:
            count = self.queue.purge()
        except S3QueueError as exc:  # it may have deleted some: the window is the same
            error = str(exc)
        finally:
            self.history.record("purge_done", "producer", count=count, error=error)

    def redrive(self) -> None:
        """The operator redrives the DLQ's ungrouped dead letters, one entry at a time (as a
        redrive by id would), each recorded before it starts."""
        self.redriving = True  # until it returns: an operator runs a failed redrive again
        try:
            self._redrive_all()
        except S3QueueError as exc:  # listing or reading the DLQ failed: run it again later
            self.history.record("redrive_failed", "producer", error=str(exc))
            return
        self.redriving = False

    def _redrive_all(self) -> None:
        keys, storage = self.queue.keys, self.queue.storage
        now = self.queue.clock.now_ms()
        for letter in admin.dead_letters(storage, keys, limit=None):
            if letter["group"] is not None or str(letter["reason"]).startswith("Malformed"):
                # A redriven grouped message is a new enqueue at the end of its group, and a
                # malformed object's becomes a good message: left out, the checks stay exact.
                continue
            entry = next(
                (e for e in admin.iter_dead(storage, keys) if e.key == letter["key"]), None
            )
            if entry is None:
                continue
            self.history.record("redrive", "producer", id=letter["id"], key=letter["key"])
            admin.redrive_entry(storage, keys, entry, now)

    def _acked(self, spec: Spec, message_id: str) -> None:
        self.expected.total += 1
        if spec.kind == "poison":
            self.expected.poison.add(message_id)
        elif spec.kind == "permanent" or spec.body.get("dies"):
            self.expected.dead_at_once.add(message_id)

    def put_malformed(self, max_bytes: int, *, partitioned: bool = True) -> None:
        """The foreign objects of the module docstring, each recorded once it is stored (with
        two in partitions' folders if `partitioned`)."""
        keys = self.queue.keys
        objects = [
            ("inbox/empty", b"", False),
            ("inbox/binary.bin", bytes(range(256)), False),
            ("inbox/bad.json", b'{"unterminated": ', False),
            ("inbox/huge.json", b"[" + b"1," * (max_bytes // 2) + b"1]", False),
            ("msg/0000000000001-garbage", b"\x00not an envelope\xff", True),
            ("msg/foreign name.txt", b"hello from elsewhere", False),
        ]
        if partitioned:
            objects += [
                ("inbox/p1/bad.json", b'{"unterminated": ', False),
                ("parts/p2/foreign name.txt", b"hello from a partition", False),
                ("inbox/~7/binary.bin", bytes(range(256)), False),  # a plain PUT, priority 7
                ("inbox/p1~3/bad.json", b'{"unterminated": ', False),
            ]
        for name, body, dead in objects:
            message_id = foreign_id(name)
            try:
                self.queue.storage.put(keys.root + name, body)
            except (S3QueueError, Crash) as exc:
                self.history.record("enqueue_failed", "producer", ids=[message_id], error=str(exc))
                if dead:
                    self.expected.maybe_dead.add(message_id)
                if isinstance(exc, Crash):
                    raise  # the process is dead: the rest is not put
                continue
            self.history.record("put_foreign", "producer", id=message_id, key=keys.root + name)
            self.expected.total += 1
            if dead:
                self.expected.dead_at_once.add(message_id)


def handler(
    history: History,
    owner: str,
    sleep: Callable[[float], None],
    now_ms: Callable[[], int],
    deadline_ms: Callable[[], int],
) -> Callable[[Message], None]:
    """The workload's handler for one worker process (see module)."""

    def handle(message: Message) -> None:
        raw: dict[str, Any] = {"kind": "raw", "ms": 5}  # a foreign object's bytes
        body: dict[str, Any] = _decoded(message.body) or raw
        kind = body.get("kind")
        history.record(
            "exec",
            owner,
            id=message.id,
            attempt=message.attempt,
            n=body.get("n"),
            kind=kind,
            group=message.group,
            **_slot(message, body),
        )
        if body is not raw and body.get("p") != message.partition:
            history.record(
                "wrong_partition", owner, id=message.id, sent=body.get("p"), got=message.partition
            )
        sleep(int(body.get("ms", 0)) / 1000)
        if now_ms() >= deadline_ms():  # remaining time 0: Lambda stops it
            history.record("crash", owner, where=f"Lambda timeout in the handler of {message.id}")
            raise Crash("Lambda timeout")
        if kind == "poison":
            raise RuntimeError(f"poison {body.get('n')} at attempt {message.attempt}")
        if kind == "permanent":
            raise PermanentError(f"permanent {body.get('n')}")
        if kind == "dedup" and body.get("dies"):
            raise PermanentError(f"dies {body.get('n')}")
        if kind in ("flaky", "dedup") and message.attempt <= int(body.get("fails", 0)):
            raise RuntimeError(f"{kind} {body.get('n')} at attempt {message.attempt}")

    return handle


def _slot(message: Message, body: dict[str, Any]) -> dict[str, Any]:
    """A scheduled message's slot as its attribute and its body give it (slots.py)."""
    if SLOT_ATTRIBUTE not in message.attributes:
        return {}
    return {"slot": message.attributes[SLOT_ATTRIBUTE], "body_slot": body.get("slot")}


def _decoded(body: Any) -> dict[str, Any] | None:
    """A workload body: a dict, or the bytes of one (a message sent with `enqueue_file`)."""
    if isinstance(body, bytes) and body.startswith(b'{"n"'):
        body = json.loads(body)
    return body if isinstance(body, dict) else None

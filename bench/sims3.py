"""Simulated S3 in one region, behind a boto3-shaped client, so the real `S3Storage` runs on it.

    s3queue code --> S3Storage (real: retries, backoff, 412 settling, the create recheck)
                 --> SimS3Client (boto3's method names and answers; botocore's standard-mode
                     retries of a 503, as `make_client` configures them)
                 --> SimS3 (one bucket: MemoryStorage's semantics, per-prefix request rates,
                     latencies on the virtual clock, a request meter)

A request waits its sampled latency and then takes effect, so effects happen in virtual-time
order. S3's partitions are key ranges (`Partitions`): a bucket starts as one, and a range that
stays over its rate for `S3Model.split_after_s` is split in two at the middle of the keys it
saw, each half with the full rate. Above its partition's rate (3,500 writes / 5,500 reads per
second, a token bucket) a request is answered ``503 SlowDown`` at once; botocore retries it
after ``random() * 2**(n-1)`` seconds
(at most 20 s) up to `S3Model.sdk_retries` times, except a create, which `no_blind_resend` keeps
for `S3Storage` to check and resend. Only then does `S3Storage` see the ``ClientError``, and the
core a `StorageError`, exactly as against AWS. Every attempt that reached S3 is counted.
"""

from __future__ import annotations

import bisect
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import CapacityNotAvailableError, ClientError
from botocore.retries import adaptive, bucket, throttling
from s3queue.common.clock import Clock
from s3queue.errors import Conflict
from s3queue.producing.pacing import Pacer
from s3queue.storage.hedging import Hedging
from s3queue.storage.memory import MemoryStorage
from s3queue.storage.s3 import S3Storage
from s3queue.storage.sending import TOKEN_METADATA, no_blind_resend

from bench.simaws import Latency, S3Model
from bench.simkernel import Kernel

BUCKET = "sim"
READ_OPS = frozenset({"GetObject", "HeadObject", "ListObjectsV2"})
BILLED_KIND = {
    "PutObject": "PUT",
    "ListObjectsV2": "LIST",
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "DeleteObject": "DELETE",
    "DeleteObjects": "DELETE",
}
"""The price class of each operation (see `Prices`)."""


class RateLimit:
    """A token bucket: `rate` per second, `burst_s` seconds deep."""

    def __init__(self, rate: float, burst_s: float, now_ms: float) -> None:
        self.rate, self.depth = rate, rate * burst_s
        self.tokens, self.at_ms = self.depth, now_ms

    def take(self, now_ms: float, n: int = 1) -> bool:
        """Take `n` tokens if there are; False means 503 SlowDown."""
        if now_ms > self.at_ms:
            self.tokens = min(self.depth, self.tokens + (now_ms - self.at_ms) * self.rate / 1000)
            self.at_ms = now_ms
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


@dataclass
class Meter:
    """Requests that reached S3, by (role, operation); 503s apart; `raced`: the second copies
    of slow reads among `requests` (`SimS3Client._latency`)."""

    requests: Counter[tuple[str, str]]
    slowdowns: Counter[tuple[str, str]]
    raced: Counter[tuple[str, str]] = field(default_factory=Counter)

    @classmethod
    def empty(cls) -> Meter:
        return cls(Counter(), Counter(), Counter())

    def by_kind(self, role: str | None = None) -> Counter[str]:
        out: Counter[str] = Counter()
        for (who, op), n in self.requests.items():
            if role is None or who == role:
                out[BILLED_KIND[op]] += n
        return out


class Partition:
    """One key range of the bucket, ``[start, next partition's start)``, with its own rates."""

    SAMPLE = 256
    """Recent keys kept to choose where a split falls."""

    def __init__(self, start: str, model: S3Model, now_ms: float) -> None:
        self.start = start
        self.writes = RateLimit(model.writes_per_s, model.burst_s, now_ms)
        self.reads = RateLimit(model.reads_per_s, model.burst_s, now_ms)
        self.keys: deque[str] = deque(maxlen=self.SAMPLE)
        self.over_since_ms: float | None = None
        """When its current stretch of refusals began (None: within its rates)."""
        self.refused_ms = -1.0

    def admit(self, key: str, read: bool, now_ms: float) -> bool:
        self.keys.append(key)
        if (self.reads if read else self.writes).take(now_ms):
            if self.over_since_ms is not None and now_ms - self.refused_ms > 1_000:
                self.over_since_ms = None  # a second without a refusal: the load let up
            return True
        if self.over_since_ms is None:
            self.over_since_ms = now_ms
        self.refused_ms = now_ms
        return False

    def split_point(self) -> str | None:
        """The middle of the keys it saw lately, if that divides them (else None)."""
        keys = sorted(self.keys)
        middle = keys[len(keys) // 2] if keys else None
        return middle if middle is not None and middle > self.start and middle > keys[0] else None


class Partitions:
    """S3's partitions of one bucket, as AWS describes them (AWS-FACTS, S3 request rate): key
    ranges, not folders. A new prefix lands in the range of its neighbours and shares its rate;
    S3 splits a range only after sustained load, and until then answers 503 past the rate.

    Assumed, because AWS publishes no figure: a range over its rate for `split_after_s` without a
    calm second is split in two at the middle of its recent keys, and each half gets the full
    rate (3,500 / 5,500 a second). `S3Model.presplit` starts a run with ranges S3 already made
    (a bucket that carried such a load before).
    """

    def __init__(self, model: S3Model, now_ms: float) -> None:
        self.model = model
        self.ranges = [Partition("", model, now_ms)]
        self.splits: list[tuple[float, str]] = []
        """(virtual ms, boundary) of each split S3 made during the run."""
        for boundary in sorted(model.presplit):
            self._insert(boundary, now_ms)

    def of(self, key: str) -> Partition:
        starts = [p.start for p in self.ranges]
        return self.ranges[bisect.bisect_right(starts, key) - 1]

    def admit(self, key: str, read: bool, now_ms: float) -> bool:
        partition = self.of(key)
        admitted = partition.admit(key, read, now_ms)
        since = partition.over_since_ms
        if since is not None and now_ms - since >= self.model.split_after_s * 1000:
            boundary = partition.split_point()
            if boundary is not None:
                self._insert(boundary, now_ms)
                self.splits.append((now_ms, boundary))
            partition.over_since_ms = None
        return admitted

    def _insert(self, boundary: str, now_ms: float) -> None:
        if any(p.start == boundary for p in self.ranges):
            return
        old = self.of(boundary)
        old.writes = RateLimit(self.model.writes_per_s, self.model.burst_s, now_ms)
        old.reads = RateLimit(self.model.reads_per_s, self.model.burst_s, now_ms)
        self.ranges.append(Partition(boundary, self.model, now_ms))
        self.ranges.sort(key=lambda p: p.start)


class SimS3:
    """One bucket in one region (see the module docstring)."""

    def __init__(self, kernel: Kernel, clock: Clock, model: S3Model, rng: random.Random) -> None:
        self.kernel, self.model, self.rng = kernel, model, rng
        self.store = MemoryStorage(clock)
        self.meter = Meter.empty()
        self.partitions = Partitions(model, kernel.local_ms())
        self.on_created: Callable[[str], None] | None = None
        """Told each key a PUT wrote, new or overwritten (S3 Object Created events)."""

    def admit(self, op: str, key: str) -> bool:
        """Within the rate of the key's partition?"""
        return self.partitions.admit(key, op in READ_OPS, self.kernel.local_ms())

    def latency(self, op: str) -> Latency:
        m = self.model
        return {
            "PutObject": m.put,
            "GetObject": m.get,
            "HeadObject": m.head,
            "ListObjectsV2": m.list,
            "DeleteObject": m.delete,
            "DeleteObjects": m.delete_many,
        }[op]


def _error(code: str, status: int, op: str, message: str = "") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message or code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, op)


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class _Events:
    def register_first(self, *_: Any, **__: Any) -> None:
        """`S3Storage` registers `no_blind_resend`; this client calls it itself."""


class _Meta:
    endpoint_url = "https://s3.sim.amazonaws.com"
    region_name = "us-east-1"
    events = _Events()


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data


class _VirtualClock:
    """botocore's retry clock (`bucket.Clock`) on virtual time."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def current_time(self) -> float:
        return self.kernel.local_ms() / 1000

    def sleep(self, amount: float) -> None:
        self.kernel.wait(amount * 1000, "adaptive rate")


class _Throttles:
    """botocore's throttling detector, told directly whether an answer was a 503."""

    def is_throttling_error(self, **kwargs: Any) -> bool:
        return bool(kwargs.get("throttled"))


class AdaptiveRate:
    """botocore's adaptive retry mode (`retries={"mode": "adaptive"}`): its own rate limiter,
    CUBIC rate calculator and token bucket, on virtual time. Its token bucket would block on a
    threading condition in wall time, so a send that finds no token waits here instead, for as
    long as the bucket says (`TokenBucket._sleep_amount`)."""

    def __init__(self, kernel: Kernel) -> None:
        clock = _VirtualClock(kernel)
        self.kernel = kernel
        self.bucket = bucket.TokenBucket(max_rate=1, clock=clock)
        self.limiter = adaptive.ClientRateLimiter(
            rate_adjustor=throttling.CubicCalculator(
                starting_max_rate=0, start_time=clock.current_time()
            ),
            rate_clocker=adaptive.RateClocker(clock),
            token_bucket=self.bucket,
            throttling_detector=_Throttles(),
            clock=clock,
        )

    def before_send(self) -> None:
        if not self.limiter._enabled:
            return
        while True:
            try:
                self.bucket.acquire(block=False)
                return
            except CapacityNotAvailableError:
                wait_s = max(self.bucket._sleep_amount(1), 0.001)
                self.kernel.wait(wait_s * 1000, "adaptive rate")

    def answered(self, throttled: bool) -> None:
        self.limiter.on_receiving_response(throttled=throttled)


Pacing = Literal["none", "s3queue", "botocore"]
"""How a client paces its attempts: not at all (a plain client), as `Queue`'s own client does
(`s3queue.producing.pacing.Pacer`, wired by `s3queue.storage.clients.pace`), or as botocore's
adaptive retry mode does (what `Queue` used before: `AdaptiveRate`)."""


def sim_pacer(kernel: Kernel) -> Pacer:
    """The production `Pacer` on virtual time."""

    def sleep(seconds: float) -> None:
        kernel.wait(seconds * 1000, "pacing")

    return Pacer(clock=lambda: kernel.local_ms() / 1000, sleep=sleep)


class SimS3Client:
    """The boto3 S3 client methods `S3Storage` calls, on `SimS3`, for one role's requests,
    its attempts paced as `pacing` says (`Queue`'s own client: "s3queue")."""

    meta = _Meta()

    def __init__(self, s3: SimS3, role: str, *, pacing: Pacing = "none") -> None:
        self.s3, self.role = s3, role
        self.rate = AdaptiveRate(s3.kernel) if pacing == "botocore" else None
        self.pacer = sim_pacer(s3.kernel) if pacing == "s3queue" else None
        self.hedging = Hedging()
        """The client's races of slow reads, as `storage.transport` runs them (`_latency`)."""

    def _request(self, op: str, key: str, effect: Callable[[], Any], **retry: Any) -> Any:
        """One call as botocore makes it: attempts, 503s and their retries, then the effect."""
        s3, kernel, pacer = self.s3, self.s3.kernel, self.pacer
        attempt = 0
        while True:
            attempt += 1
            if self.rate is not None:
                self.rate.before_send()
            sent = pacer.before_send() if pacer is not None else 0.0
            kernel.charge(s3.model.client_cpu_ms)
            admitted = s3.admit(op, key)
            if self.rate is not None:
                self.rate.answered(throttled=not admitted)
            if admitted:
                kernel.wait(self._latency(op, key), op)
                s3.meter.requests[(self.role, op)] += 1
                if pacer is not None:
                    pacer.answered(sent, throttled=False)
                served = time.thread_time()
                try:
                    return effect()
                finally:  # S3's work, not the caller's: its CPU is given back
                    # (`client_cpu_ms`, `list_key_cpu_ms` charge what the caller does)
                    kernel.charge(-(time.thread_time() - served) * 1000)
            kernel.wait(s3.model.slowdown.sample(s3.rng), op)
            if pacer is not None:
                pacer.answered(sent, throttled=True)
            s3.meter.slowdowns[(self.role, op)] += 1
            error = _error("SlowDown", 503, op, "Please reduce your request rate.")
            if attempt > s3.model.sdk_retries or no_blind_resend(retry.get("request")) is False:
                raise error
            delay = min(s3.rng.random() * 2 ** (attempt - 1), 20.0)
            kernel.wait(delay * 1000, "sdk backoff")

    def _latency(self, op: str, key: str) -> float:
        """An admitted attempt's time to its answer. A read still out after the client's
        `Hedging.after_ms` is raced as `storage.transport` races it: a second copy sent then,
        on its own admission, CPU and latency, and whichever answers first is used (a copy
        refused with a 503 answers at once, and the first's answer is waited for)."""
        s3, kernel = self.s3, self.s3.kernel
        first = s3.latency(op).sample(s3.rng)
        after = self.hedging.after_ms(op) if s3.model.hedging else None
        if after is None or first <= after:
            self.hedging.observe(op, first, raced=False)
            return first
        kernel.wait(after, op)
        kernel.charge(s3.model.client_cpu_ms)
        if s3.admit(op, key):
            s3.meter.requests[(self.role, op)] += 1
            s3.meter.raced[(self.role, op)] += 1
            answered = min(first, after + s3.latency(op).sample(s3.rng))
        else:
            s3.meter.slowdowns[(self.role, op)] += 1
            answered = first
        self.hedging.observe(op, answered, raced=True)
        return answered - after

    # -- the operations ---------------------------------------------------------------------

    def get_object(self, *, Bucket: str, Key: str, **params: Any) -> dict[str, Any]:
        if_match = str(params["IfMatch"]).strip('"') if "IfMatch" in params else None

        def effect() -> dict[str, Any]:
            obj = self.s3.store.get(Key)
            if obj is None:
                raise _error("NoSuchKey", 404, "GetObject")
            if if_match is not None and obj.etag != if_match:
                raise _error("PreconditionFailed", 412, "GetObject")
            return {
                "Body": _Body(obj.body),
                "ETag": f'"{obj.etag}"',
                "LastModified": _when(obj.last_modified_ms),
            }

        return self._request("GetObject", Key, effect)  # type: ignore[no-any-return]

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        def effect() -> dict[str, Any]:
            head = self.s3.store.head(Key)
            if head is None:
                raise _error("404", 404, "HeadObject")
            meta = {TOKEN_METADATA: head.token} if head.token else {}
            return {
                "ETag": f'"{head.etag}"',
                "Metadata": meta,
                "ContentLength": head.size,
                "LastModified": _when(head.last_modified_ms),
            }

        return self._request("HeadObject", Key, effect)  # type: ignore[no-any-return]

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **params: Any) -> dict[str, Any]:
        if_match = str(params["IfMatch"]).strip('"') if "IfMatch" in params else None
        if_none_match = params.get("IfNoneMatch") == "*"
        token = params.get("Metadata", {}).get(TOKEN_METADATA)
        headers = {"If-None-Match": "*"} if if_none_match else {}
        if token is not None:
            headers[f"x-amz-meta-{TOKEN_METADATA}"] = token

        def effect() -> dict[str, Any]:
            store = self.s3.store
            if if_match is not None and store.head(Key) is None:
                raise _error("NoSuchKey", 404, "PutObject")  # AWS: If-Match on a missing key
            try:
                etag = store.put(
                    Key, Body, if_match=if_match, if_none_match=if_none_match, token=token
                )
            except Conflict as exc:
                raise _error("PreconditionFailed", 412, "PutObject") from exc
            if self.s3.on_created is not None:  # an overwrite is an Object Created event too
                self.s3.on_created(Key)
            return {"ETag": f'"{etag}"'}

        return self._request(  # type: ignore[no-any-return]
            "PutObject", Key, effect, request={"headers": headers}
        )

    def delete_object(self, *, Bucket: str, Key: str, **params: Any) -> dict[str, Any]:
        if_match = str(params["IfMatch"]).strip('"') if "IfMatch" in params else None

        def effect() -> dict[str, Any]:
            try:
                self.s3.store.delete(Key, if_match=if_match)
            except Conflict as exc:
                raise _error("PreconditionFailed", 412, "DeleteObject") from exc
            return {}

        return self._request("DeleteObject", Key, effect)  # type: ignore[no-any-return]

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        keys = [o["Key"] for o in Delete["Objects"]]
        versions = {o["Key"]: str(o["ETag"]).strip('"') for o in Delete["Objects"] if "ETag" in o}

        def effect() -> dict[str, Any]:
            self.s3.store.delete_many(keys, if_match=versions)
            return {"Errors": []}

        # One POST request against the prefix's rate, as AWS-FACTS words the limit (requests);
        # counting each key would starve a 10-key delete behind single-token producers.
        return self._request("DeleteObjects", keys[0], effect)  # type: ignore[no-any-return]

    def list_objects_v2(
        self,
        *,
        Bucket: str,
        Prefix: str,
        MaxKeys: int = 1000,
        StartAfter: str | None = None,
        Delimiter: str | None = None,
        ContinuationToken: str | None = None,
    ) -> dict[str, Any]:
        def effect() -> dict[str, Any]:
            if Delimiter is not None:  # the partition folders: one page holds them all here
                folders = self.s3.store.list_folders(Prefix)
                return {"CommonPrefixes": [{"Prefix": f} for f in folders], "IsTruncated": False}
            page = self.s3.store.list(Prefix, start_after=StartAfter, limit=MaxKeys)
            contents = [
                {
                    "Key": e.key,
                    "ETag": f'"{e.etag}"',
                    "Size": e.size,
                    "LastModified": _when(e.last_modified_ms),
                }
                for e in page.entries
            ]
            return {"Contents": contents, "IsTruncated": page.truncated}

        answer: dict[str, Any] = self._request("ListObjectsV2", Prefix, effect)
        listed = len(answer.get("Contents", answer.get("CommonPrefixes", [])))
        self.s3.kernel.charge(listed * self.s3.model.list_key_cpu_ms)
        return answer


def sim_storage(s3: SimS3, role: str, *, pacing: Pacing = "none") -> S3Storage:
    """The production `S3Storage` on the simulated bucket; its backoff sleeps in virtual time;
    its client's attempts paced as `pacing` says."""
    kernel = s3.kernel

    def backoff(seconds: float) -> None:
        kernel.wait(seconds * 1000, "S3Storage backoff")

    return S3Storage(
        SimS3Client(s3, role, pacing=pacing),
        BUCKET,
        sleep=backoff,
        rng=random.Random(s3.rng.random()),
    )

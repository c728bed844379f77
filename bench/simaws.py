"""What the AWS simulation assumes about AWS in one region: latencies, limits and prices.

Every figure says where it comes from. "AWS-FACTS" is /work/shared/AWS-FACTS.md (the project's
digest of AWS documentation); figures marked *assumed* are not in it: typical published values,
to be replaced by measurements (each is one field here).

Latencies are log-normal, given by their median and 99th percentile, and cut at `cap_ms`:
AWS-FACTS says a small S3 request's median is "in the tens of milliseconds" within a region,
that the tail is long, and that a request not answered after 2 s is worth retrying (so no
sample is longer than 2 s).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

Z99 = 2.3263478740408408
"""The standard normal's 99th percentile."""


@dataclass(frozen=True)
class Latency:
    """A log-normal latency: median `p50_ms`, 99th percentile `p99_ms`, no sample above `cap_ms`."""

    p50_ms: float
    p99_ms: float
    cap_ms: float = 2_000.0
    source: str = ""

    def sample(self, rng: random.Random) -> float:
        if self.p99_ms <= self.p50_ms:
            return self.p50_ms
        sigma = math.log(self.p99_ms / self.p50_ms) / Z99
        return min(self.cap_ms, self.p50_ms * math.exp(rng.gauss(0.0, sigma)))


_S3 = "AWS-FACTS (S3 latency: median in the tens of ms, long tail, retry after 2 s)"


@dataclass(frozen=True)
class S3Model:
    """S3 Standard in one region."""

    put: Latency = Latency(30, 200, source=_S3 + "; PUT ~30 ms p50 (issue 13)")
    get: Latency = Latency(18, 120, source=_S3 + "; GET ~15-20 ms p50 (issue 13)")
    head: Latency = Latency(15, 100, source=_S3 + "; as GET, no body")
    list: Latency = Latency(50, 250, source=_S3 + "; LIST ~50 ms p50 (issue 13)")
    delete: Latency = Latency(25, 150, source=_S3 + "; DELETE as a small PUT, assumed")
    delete_many: Latency = Latency(35, 200, source=_S3 + "; DeleteObjects, assumed")
    slowdown: Latency = Latency(10, 50, source="a 503 answers at once, assumed")
    writes_per_s: float = 3_500.0
    """PUT/COPY/POST/DELETE requests per second per partitioned prefix (AWS-FACTS, S3 request
    rate); a DeleteObjects is one (POST) request."""
    reads_per_s: float = 5_500.0
    """GET/HEAD per second per partitioned prefix (AWS-FACTS); LIST counted with the reads."""
    burst_s: float = 1.0
    """Token-bucket depth in seconds of the rate (assumed: S3 publishes no burst figure)."""
    split_after_s: float = 1_800.0
    """Seconds a key range stays over its rate before S3 splits it (assumed: AWS-FACTS says S3
    splits only after sustained load, gradually, in an undocumented time; forum reports say
    tens of minutes). Until then every key of the range shares one rate, whatever its folder."""
    presplit: tuple[str, ...] = ()
    """Range boundaries S3 has already made when the run starts (a bucket that carried such a
    load before); empty: a fresh bucket, one range."""
    sdk_retries: int = 5
    """botocore standard-mode retries of the client `make_client` builds (s3queue code)."""
    client_cpu_ms: float = 0.15
    """CPU (of this machine's core) each attempt costs the caller beyond the Python the
    simulation runs: the HTTP exchange by the lean path's own transport
    (`s3queue.storage.transport`), 0.12-0.16 ms a call against SeaweedFS, measured beside
    botocore's session's 0.37-0.53 (docs/performance.md, session 21; 0.5 until then, urllib3
    and `http.client`). The simulated client's own Python stands in for the lean path's
    signing and reading. TLS, which AWS adds, is not in it."""
    hedging: bool = True
    """Clients race their slow reads as `s3queue.storage.transport` does (`storage/hedging.py`:
    after the recent 95th percentile, within a budget), each copy with its own latency, drawn
    independently of the first's (assumed; AWS advises "tracking and aggressively retrying
    slower operations" on a new connection and says "even a single retry is frequently
    effective at reducing latency": whitepaper *Optimizing Amazon S3 performance*, "Timeouts
    and retries for latency-sensitive applications"). False: no race (session 20's model)."""
    list_key_cpu_ms: float = 0.0058
    """...and each key a LIST answers, reading its XML: `S3Storage.list` by the lean path cost
    5.9-6.5 ms of this machine's CPU for 1,000 keys against SeaweedFS, 0.51-0.59 for 10
    (docs/performance.md, session 20). The simulated S3's own work (finding the keys, building
    the answer) is not the caller's: it is not charged."""


@dataclass(frozen=True)
class LambdaModel:
    """AWS Lambda, asynchronous invocations, Python on arm64."""

    invoke: Latency = Latency(30, 100, source="async Invoke ~30 ms (issue 13), assumed")
    delivery: Latency = Latency(
        40, 250, source="202 to the function's start (Lambda's internal queue), assumed"
    )
    warm_start: Latency = Latency(3, 20, source="a warm container takes the event, assumed")
    cold_start: Latency = Latency(
        460,
        1_000,
        source="sandbox init ~300 ms (assumed) + import of the worker entry point: 246-252 ms "
        "with the X-Ray SDK (550 / 1,200 until session 17), 0.64 of that without it, the "
        "default since (bench coldstart, side by side; docs/performance.md, Cold start)",
    )
    keep_warm_s: float = 600.0
    """An idle container is reclaimed after this long (assumed; AWS publishes no figure)."""
    account_concurrency: int = 1_000
    """The account's regional concurrency (AWS-FACTS: 1,000 by default, shared)."""
    full_vcpu_mb: int = 1_769
    """The memory at which a function has the equivalent of one vCPU; below it, CPU in
    proportion to memory (Lambda documentation, "Configuring Lambda function memory": "Lambda
    allocates CPU power in proportion to the amount of memory configured ... At 1,769 MB, a
    function has the equivalent of one vCPU"). Above it a function has more vCPUs, but one
    Python interpreter runs one thread at a time, so it runs no faster here."""
    throttle_retry_s: tuple[float, float] = (1.0, 300.0)
    """A throttled async event is retried after 1 s, doubling to 5 min, until its maximum age
    (Lambda documentation, asynchronous invocation; AWS-FACTS: "throttled async events are
    retried by Lambda")."""

    def cpu_scale(self, memory_mb: int, per_vcpu: float) -> float:
        """Virtual ms a ms of this machine's CPU takes in a container of `memory_mb`, given
        `per_vcpu` for a whole vCPU (`Model.cpu_scale`)."""
        return per_vcpu * max(1.0, self.full_vcpu_mb / memory_mb)


@dataclass(frozen=True)
class EventModel:
    """What starts the coordinator."""

    schedule_s: float = 60.0
    """EventBridge ``rate(1 minute)``, the shortest rate (AWS-FACTS)."""
    s3_event: Latency = Latency(
        400,
        1_500,
        cap_ms=10_000,
        source="PUT to EventBridge rule target (S3 Object Created events), assumed: "
        "'typically seconds or less' in the S3 event notification docs",
    )


@dataclass(frozen=True)
class Prices:
    """USD, us-east-1 list prices."""

    s3_put_list_per_1000: float = 0.005
    """PUT, COPY, POST, LIST (AWS-FACTS)."""
    s3_get_per_1000: float = 0.0004
    """GET, HEAD and others (AWS-FACTS)."""
    s3_delete_per_1000: float = 0.0
    """DELETE free (AWS-FACTS); DeleteObjects counted as free too, as in docs/performance.md."""
    lambda_per_million: float = 0.20
    """Lambda requests (AWS-FACTS)."""
    lambda_gb_s: float = 0.0000133334
    """arm64 duration per GB-second, first tier (assumed: AWS-FACTS gives no figure)."""
    eventbridge_per_million: float = 0.0
    """Schedule and S3 Object Created events on the default bus (assumed free as AWS service
    events; AWS-FACTS gives no EventBridge price). A rule's Lambda start is billed as a Lambda
    request above."""
    sqs_per_million_messages: dict[str, float] = field(
        default_factory=lambda: {"unbatched": 1.20, "batched (10 per call)": 0.12}
    )
    """SQS standard: $0.40 per million requests, send + receive + delete (AWS-FACTS)."""


@dataclass(frozen=True)
class Model:
    """AWS as the simulation sees it."""

    s3: S3Model = S3Model()
    lam: LambdaModel = LambdaModel()
    events: EventModel = EventModel()
    prices: Prices = Prices()
    cpu_scale: float = 1.0
    """Virtual seconds charged per CPU second an actor's own Python spends on a whole vCPU
    (see simkernel): 1.0 assumes a Lambda vCPU as fast as this machine's core (assumed; not
    measured, no AWS account here). A function gets its memory's share of a vCPU
    (`LambdaModel.cpu_scale`: a 256 MB function's CPU is 6.9 times slower); producers, outside
    Lambda, a whole one each."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AWS = Model()

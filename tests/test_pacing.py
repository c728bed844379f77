"""`Pacer` (producing/pacing.py) on a fake clock: what it measures, when it cuts, how it grows
back and how it hands out slots, beside botocore's adaptive limiter in the same situations."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.retries import adaptive, bucket, throttling
from s3queue.errors import Throttled
from s3queue.local.seaweed import EmbeddedS3
from s3queue.producing.pacing import Pacer
from s3queue.producing.producer import Queue
from s3queue.storage.clients import make_client, pace


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)  # a sender's wait; the test moves time itself


def _pacer(clock: FakeClock, **options: float) -> Pacer:
    return Pacer(clock=clock, sleep=clock.sleep, **options)


def _accepted(pacer: Pacer, clock: FakeClock, rate: float, seconds: float) -> None:
    """Senders whose attempts S3 accepts at `rate` a second for `seconds` (30 ms answers)."""
    for _ in range(round(rate * seconds)):
        clock.t += 1 / rate
        sent = pacer.before_send()
        pacer.answered(sent - 0.03, throttled=False)


class _Botocore:
    """botocore's adaptive limiter (retries={"mode": "adaptive"}) on the same fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        class Clock:
            def current_time(self) -> float:
                return clock.t

            def sleep(self, amount: float) -> None:
                clock.slept.append(amount)

        class Detector:
            def is_throttling_error(self, **kwargs: object) -> bool:
                return bool(kwargs["throttled"])

        self.bucket = bucket.TokenBucket(max_rate=1, clock=Clock())
        self.limiter = adaptive.ClientRateLimiter(
            throttling.CubicCalculator(starting_max_rate=0, start_time=clock.t),
            adaptive.RateClocker(Clock()),
            self.bucket,
            Detector(),
            Clock(),
        )

    def answered(self, throttled: bool) -> None:
        self.limiter.on_receiving_response(throttled=throttled)


def test_until_s3_throttles_nothing_waits() -> None:
    clock = FakeClock()
    pacer = _pacer(clock)
    _accepted(pacer, clock, 5_000, 2.0)
    state = pacer.state()
    assert clock.slept == [] and not state.paced and state.rate is None
    assert state.accepted == pytest.approx(5_000, rel=0.01)


def test_a_throttle_in_the_first_half_second_cuts_to_what_s3_accepted_not_to_zero() -> None:
    # GIVEN a fresh client whose senders S3 accepts at 3,500 a second, throttled 0.4 s in
    # (the simulation's 1,000 producers met their first 503 there)
    clock = FakeClock(1000.0)
    pacer, boto = _pacer(clock), _Botocore(clock)
    for _ in range(1_400):
        clock.t += 1 / 3_500
        pacer.answered(pacer.before_send(), throttled=False)
        boto.answered(throttled=False)
    # WHEN the throttle comes
    pacer.answered(clock.t, throttled=True)
    boto.answered(throttled=True)
    # THEN the pacer sends at 0.7 of the accepted rate, where botocore's limiter, which had
    # not yet closed its first half-second slot, measured 0 and fell to its floor
    assert pacer.state().rate == pytest.approx(0.7 * 3_500, rel=0.02)
    assert boto.bucket.max_rate == 0.5


def test_after_an_idle_spell_senders_start_at_the_last_rate_s3_gave() -> None:
    clock = FakeClock()
    pacer = _pacer(clock)
    _accepted(pacer, clock, 3_000, 2.0)
    pacer.answered(clock.t, throttled=True)
    clock.t += 60.0  # a minute without a request
    state = pacer.state()
    assert state.accepted == 0 and state.rate is not None and state.rate >= 3_000


def test_answers_to_attempts_in_flight_at_a_cut_do_not_cut_again() -> None:
    # GIVEN 500 attempts sent before the first throttle came back
    clock = FakeClock()
    pacer = _pacer(clock)
    _accepted(pacer, clock, 3_500, 1.5)
    in_flight = [pacer.before_send() for _ in range(500)]
    clock.t += 0.03
    # WHEN all of them come back throttled
    for sent in in_flight:
        pacer.answered(sent, throttled=True)
    # THEN the rate was cut once (botocore cuts at every one: 0.7^500)
    state = pacer.state()
    assert state.throttles == 500 and state.cuts == 1
    assert state.rate == pytest.approx(0.7 * 3_500, rel=0.05)


def test_a_throttle_after_the_cut_cuts_again_from_the_accepted_rate() -> None:
    clock = FakeClock()
    pacer = _pacer(clock)
    _accepted(pacer, clock, 3_500, 1.5)
    pacer.answered(clock.t, throttled=True)
    _accepted(pacer, clock, 2_000, 1.5)  # S3 now takes 2,000 a second of this client's
    pacer.answered(clock.t - 0.01, throttled=True)
    state = pacer.state()
    assert state.cuts == 2
    assert state.rate == pytest.approx(0.7 * 2_000, rel=0.02)


def test_the_rate_grows_back_to_the_cut_and_past_it_while_senders_use_it() -> None:
    clock = FakeClock()
    pacer = _pacer(clock)
    _accepted(pacer, clock, 3_500, 1.5)
    pacer.answered(clock.t, throttled=True)
    cut_at = clock.t
    rates = []
    for second in range(1, 36):
        while clock.t < cut_at + second:
            rate = pacer.state().rate or 0.0
            clock.t += 1 / rate
            pacer.answered(clock.t - 0.03, throttled=False)  # S3 takes them all
        rates.append(pacer.state().rate or 0.0)
    assert rates == sorted(rates)  # never down without a throttle
    k = (3_500 * 0.3 / 0.4) ** (1 / 3)  # CUBIC's K: back at 3,500 after ~13.8 s
    assert rates[int(k) - 2] < 3_500 <= rates[int(k) + 1]
    assert rates[-1] > 7_000  # then probing for more: twice W after ~35 s (a split gives more)


def test_waiting_senders_get_their_own_slots_in_order() -> None:
    # GIVEN a client paced at 100 a second (accepted 100/0.7 a second)
    clock = FakeClock()
    pacer = _pacer(clock, min_rate=1.0)
    _accepted(pacer, clock, 100 / 0.7, 2.0)
    pacer.answered(clock.t, throttled=True)
    rate = pacer.state().rate
    assert rate is not None and rate == pytest.approx(100, rel=0.02)
    # WHEN 50 senders ask at the same instant
    slots = [pacer.before_send() for _ in range(50)]
    # THEN each waits for its own slot, 1/rate apart, in the order they came
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert gaps == pytest.approx([1 / rate] * 49, rel=0.02)
    assert clock.slept == pytest.approx([s - clock.t for s in slots[1:]])


def test_a_slot_too_far_away_raises_throttled_and_keeps_no_place() -> None:
    clock = FakeClock()
    pacer = _pacer(clock, min_rate=1.0, max_wait_s=0.5)
    _accepted(pacer, clock, 100 / 0.7, 2.0)
    pacer.answered(clock.t, throttled=True)
    slots = [pacer.before_send() for _ in range(51)]  # 0 .. 0.5 s away at 100 a second
    with pytest.raises(Throttled, match="nothing was sent"):
        pacer.before_send()
    assert pacer.state().refused == 1
    clock.t += 0.02  # two slots later, the next sender fits again, right after the last one
    assert pacer.before_send() == pytest.approx(slots[-1] + 0.01)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self.body


_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


def _answering(client: Any, statuses: list[int]) -> list[int]:
    """Make `client`'s S3 answer each attempt with the next of `statuses` (503: SlowDown), in
    botocore's own pipeline (a before-send handler after `pace`'s); the attempts it answered."""
    sent: list[int] = []

    def answer(request: Any, **_: object) -> AWSResponse:
        status = statuses[len(sent)]
        sent.append(status)
        body = _SLOWDOWN if status == 503 else b""
        return AWSResponse(request.url, status, {"ETag": '"e"'}, _Raw(body))

    client.meta.events.register("before-send.s3", answer)
    return sent


def test_a_paced_boto3_client_learns_from_its_answers_and_paces_its_attempts() -> None:
    # GIVEN a real boto3 client (no retries of its own here) run through a pacer
    clock = FakeClock()
    client = make_client("http://127.0.0.1:9", credentials=("k", "s"), sdk_retries=0, lean=False)
    pacer = pace(client, Pacer(clock=clock, sleep=clock.sleep, min_rate=4.0))
    sent = _answering(client, [200, 503, 200, 200])
    client.put_object(Bucket="b", Key="k0", Body=b"x")
    assert not pacer.state().paced
    # WHEN S3 answers SlowDown
    with pytest.raises(ClientError, match="SlowDown"):
        client.put_object(Bucket="b", Key="k1", Body=b"x")
    # THEN the pacer saw it, and the next attempts wait for their slots
    state = pacer.state()
    assert state.paced and state.throttles == 1 and state.rate is not None
    client.put_object(Bucket="b", Key="k2", Body=b"x")
    client.put_object(Bucket="b", Key="k3", Body=b"x")
    assert sent == [200, 503, 200, 200]
    assert clock.slept == [pytest.approx(1 / state.rate)]  # the 3rd waited for its slot


def test_a_paced_boto3_client_raises_throttled_without_sending_when_the_wait_is_too_long() -> None:
    clock = FakeClock()
    client = make_client("http://127.0.0.1:9", credentials=("k", "s"), sdk_retries=3, lean=False)
    pacer = pace(client, Pacer(clock=clock, sleep=clock.sleep, min_rate=4.0, max_wait_s=0.1))
    sent = _answering(client, [200, 200])
    pacer.answered(clock.t, throttled=True)  # paced at 4 a second: a slot every 0.25 s
    client.put_object(Bucket="b", Key="k0", Body=b"x")
    with pytest.raises(Throttled, match="nothing was sent"):
        client.put_object(Bucket="b", Key="k1", Body=b"x")
    assert sent == [200] and pacer.state().refused == 1


def test_a_queues_own_client_is_paced_and_an_enqueue_too_far_from_its_slot_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("S3QUEUE_ENDPOINT_URL", "http://127.0.0.1:9")
    queue = Queue("q", bucket="b")
    pacer = queue.pacing
    assert pacer is not None
    sent = _answering(queue.storage._client, [200] * 10)  # type: ignore[attr-defined]
    queue.enqueue({"n": 1})
    assert pacer.state().accepted > 0  # its answers reach the pacer
    # WHEN S3 throttles and the pacer's next slots are far apart (beta: 0.001 of the rate)
    pacer.beta, pacer.min_rate, pacer.max_wait_s = 0.001, 0.001, 1.0
    pacer.answered(pacer.before_send(), throttled=True)
    pacer.before_send()  # another sender took the slot at hand
    # THEN an enqueue raises Throttled, with nothing sent
    with pytest.raises(Throttled, match="nothing was sent"):
        queue.enqueue({"n": 2})
    assert len(sent) == 1


@pytest.mark.s3
def test_a_paced_queue_sends_and_counts_its_answers_on_a_real_s3_server(
    seaweed: EmbeddedS3, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a Queue of its own client against SeaweedFS (its pacer hooked into every attempt)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "s3queue")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3queue-secret")
    monkeypatch.setenv("S3QUEUE_ENDPOINT_URL", seaweed.endpoint_url)
    queue = Queue("paced", bucket=bucket)
    # WHEN it enqueues, one id twice
    ids = [queue.enqueue({"n": n}) for n in range(20)]
    assert queue.enqueue({"n": 0}, id="once") == queue.enqueue({"n": 1}, id="once")
    # THEN every message is there, the pacer counted the answers and did not pace (no 503)
    assert queue.stats()["pending"] == len(set(ids)) + 1
    state = queue.pacing.state() if queue.pacing is not None else None
    assert state is not None and state.accepted > 0 and not state.paced


def test_pace_refuses_a_client_on_the_lean_path_whose_answers_it_would_never_see() -> None:
    client = make_client("http://127.0.0.1:9", credentials=("k", "s"))
    with pytest.raises(ValueError, match="lean=False"):
        pace(client, Pacer())

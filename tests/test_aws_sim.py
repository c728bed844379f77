"""The AWS simulation's parts (bench/): virtual time, simulated S3 under the real S3Storage, and
simulated Lambda under the real LambdaInvoker. Everything runs in virtual time: no sleeping,
no wall-clock assertions."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.invoke import LambdaInvoker
from s3queue.errors import StorageError, Throttled
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys
from s3queue.storage import MemoryStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench/

from s3queue.storage.base import iter_keys

from bench import simgroup, simshards
from bench.measure import percentile
from bench.simaws import AWS, LambdaModel, Latency, S3Model
from bench.simgroup import Load
from bench.simkernel import Cpu, Kernel, SimClock, SimLock
from bench.simlambda import LambdaService, SimFunction, SimLambdaClient
from bench.sims3 import Pacing, RateLimit, SimS3, sim_storage


def _s3(seed: int = 1, **model: Any) -> tuple[Kernel, SimS3]:
    kernel = Kernel(0.0)
    return kernel, SimS3(kernel, SimClock(kernel), replace(S3Model(), **model), random.Random(seed))


def _in_actor(kernel: Kernel, body: Any) -> None:
    """Run `body` as the one actor and let virtual time run out."""
    kernel.spawn(body, at_ms=0.0, name="test", role="producer")
    kernel.run(10_000_000.0)
    kernel.stop()


# -- virtual time ------------------------------------------------------------------------------


def test_actors_run_in_virtual_time_order_one_at_a_time() -> None:
    kernel = Kernel(0.0)
    clock = SimClock(kernel)
    seen: list[tuple[str, int]] = []

    def actor(name: str, period: float) -> Any:
        def body() -> None:
            for _ in range(3):
                clock.sleep(period)
                seen.append((name, clock.now_ms()))

        return body

    kernel.spawn(actor("a", 0.1), at_ms=0.0, name="a", role="t")
    kernel.spawn(actor("b", 0.25), at_ms=0.0, name="b", role="t")
    kernel.call_at(150.0, lambda: seen.append(("timer", int(kernel.now))))
    kernel.run(1_000.0)
    kernel.stop()
    assert seen == [
        ("a", 100),
        ("timer", 150),
        ("a", 200),
        ("b", 250),
        ("a", 300),
        ("b", 500),
        ("b", 750),
    ]


def test_stop_unwinds_every_waiting_actor() -> None:
    kernel = Kernel(0.0)
    clock = SimClock(kernel)
    finished = threading.Event()

    def forever() -> None:
        try:
            while True:
                clock.sleep(1.0)
        finally:
            finished.set()

    kernel.spawn(forever, at_ms=0.0, name="forever", role="t")
    kernel.run(5_000.0)
    kernel.stop()
    assert finished.is_set()
    assert kernel.actors[0].waited_ms["sleep"] >= 5_000


def test_a_full_collection_of_the_shared_heap_is_charged_as_one_of_a_function_s_own() -> None:
    """Every actor shares this interpreter's heap, so a full collection one of them sets off
    walks the whole world's objects: charged at most `full_gc_ms`, the rest counted apart."""
    import gc

    kernel = Kernel(cpu_scale=1.0)
    world = [[n] for n in range(1_000_000)]  # the simulated world's objects, after the start
    charged: list[float] = []

    def body() -> None:
        before = kernel.local_ms()
        gc.collect()
        charged.append(kernel.local_ms() - before)

    kernel.spawn(body, at_ms=kernel.now, name="collector", role="t")
    kernel.run(kernel.now + 1_000.0)
    kernel.stop()
    assert len(world) == 1_000_000
    assert kernel.gc_excluded_ms > 0
    assert charged[0] <= kernel.full_gc_ms + 5.0  # + the actor's own few statements
    assert kernel._full_gc not in gc.callbacks  # stop() unhooks it
    assert Kernel(0.0).full_gc_ms == 0.0  # no CPU charged: nothing measured, nothing hooked


def test_actors_of_one_process_queue_for_its_cpu_and_other_processes_do_not() -> None:
    """A process's threads share its CPU (one interpreter runs one thread at a time): the
    second to want it waits for the first. Two processes run side by side."""
    kernel = Kernel(0.0, cpu_scale=1.0)
    shared = Cpu(10.0)
    done: dict[str, float] = {}

    def burn(name: str) -> Any:
        def body() -> None:
            kernel.charge(5.0)  # 5 ms of this machine's CPU: 50 ms on a CPU 10 times slower
            kernel.wait(0.0, "io")
            done[name] = kernel.now

        return body

    for name, cpu in (("a", shared), ("b", shared), ("c", Cpu(10.0))):
        kernel.spawn(burn(name), at_ms=0.0, name=name, role="worker", cpu=cpu)
    kernel.run(1_000.0)
    kernel.stop()
    assert done["a"] == pytest.approx(50.0, abs=5.0)
    assert done["b"] == pytest.approx(100.0, abs=10.0)  # queued behind a on their one CPU
    assert done["c"] == pytest.approx(50.0, abs=5.0)  # a process of its own
    b = next(actor for actor in kernel.actors if actor.name == "b")
    assert b.waited_ms["cpu queue"] == pytest.approx(50.0, abs=5.0)
    assert b.cpu_ms == pytest.approx(50.0, abs=5.0)


def test_a_function_s_cpu_is_its_memory_s_share_of_a_vcpu() -> None:
    # Lambda: one vCPU at 1,769 MB, CPU in proportion below; one interpreter gains nothing above
    assert LambdaModel().cpu_scale(1_769, 1.0) == 1.0
    assert LambdaModel().cpu_scale(256, 1.0) == pytest.approx(6.91, abs=0.01)
    assert LambdaModel().cpu_scale(10_240, 2.0) == 2.0
    kernel = Kernel(0.0, cpu_scale=1.0)
    service = LambdaService(kernel, LambdaModel(), random.Random(2))

    def body(event: dict[str, Any], context: Any, container: Any) -> None:
        kernel.charge(10.0)  # 10 ms of this machine's CPU

    for memory in (256, 1_769):
        service.add(SimFunction(f"f{memory}", "worker", body, object, memory, 60.0, None, 300.0))
        kernel.call_at(0.0, lambda m=memory: service.submit(f"f{m}", {}))
    kernel.run(60_000.0)
    kernel.stop()
    assert service.functions["f256"].billed_ms == pytest.approx(69.1, abs=5.0)
    assert service.functions["f1769"].billed_ms == pytest.approx(10.0, abs=5.0)


def test_every_s3_attempt_costs_its_caller_the_client_s_cpu() -> None:
    fast = replace(S3Model(), put=Latency(30, 30), client_cpu_ms=0.0)
    for model, low, high in ((fast, 30.0, 31.0), (replace(fast, client_cpu_ms=20.0), 50.0, 52.0)):
        kernel = Kernel(0.0, cpu_scale=1.0)
        s3 = SimS3(kernel, SimClock(kernel), model, random.Random(1))
        storage = sim_storage(s3, "producer")
        took: list[float] = []

        def body(storage: Any = storage, took: list[float] = took, kernel: Kernel = kernel) -> None:
            before = kernel.local_ms()
            storage.put("s3queue/q/msg/a", b"x")
            took.append(kernel.local_ms() - before)

        _in_actor(kernel, body)
        assert low <= took[0] <= high + 5.0  # + the simulated client's own Python


def test_a_list_costs_its_caller_per_key_and_s3s_own_work_nothing() -> None:
    free = replace(S3Model(), list=Latency(50, 50), put=Latency(1, 1), client_cpu_ms=0.0)
    took: dict[float, float] = {}
    for per_key in (0.0, 1.0):
        kernel = Kernel(0.0, cpu_scale=1.0)
        s3 = SimS3(
            kernel, SimClock(kernel), replace(free, list_key_cpu_ms=per_key), random.Random(1)
        )
        for n in range(1000):
            s3.store.put(f"s3queue/q/msg/{n:04d}", b"x")
        s3.store.list = _burning(s3.store.list, 20.0)  # type: ignore[method-assign]
        storage = sim_storage(s3, "coordinator")

        def body(storage: Any = storage, kernel: Kernel = kernel, per_key: float = per_key) -> None:
            before = kernel.local_ms()
            assert len(storage.list("s3queue/q/msg/", limit=20).entries) == 20
            took[per_key] = kernel.local_ms() - before

        _in_actor(kernel, body)
    # the latency and the simulated client's own Python; not S3's 20 ms to find the keys
    assert 50.0 <= took[0.0] <= 52.0
    assert 19.5 <= took[1.0] - took[0.0] <= 22.0  # 20 keys at 1 ms each


def _burning(call: Any, ms: float) -> Any:
    """`call`, spending `ms` of this thread's CPU first (S3's work, in the simulated S3)."""

    def burn(*args: Any, **kwargs: Any) -> Any:
        until = time.thread_time() + ms / 1000
        while time.thread_time() < until:
            pass
        return call(*args, **kwargs)

    return burn


# -- simulated S3 ------------------------------------------------------------------------------


def _put_get_times(seed: int) -> list[float]:
    kernel, s3 = _s3(seed)
    storage = sim_storage(s3, "producer")
    times: list[float] = []

    def body() -> None:
        for n in range(50):
            before = kernel.now
            storage.put(f"s3queue/q/msg/{n:04d}", b"x", if_none_match=True, token=f"t{n}")
            storage.get(f"s3queue/q/msg/{n:04d}")
            times.append(kernel.now - before)

    _in_actor(kernel, body)
    return times


def test_latencies_are_deterministic_under_a_seed() -> None:
    assert _put_get_times(3) == _put_get_times(3)
    assert _put_get_times(3) != _put_get_times(4)


def test_latency_samples_follow_their_median_and_tail() -> None:
    latency = Latency(30, 200)
    rng = random.Random(5)
    samples = [latency.sample(rng) for _ in range(20_000)]
    assert 28 <= percentile(samples, 50) <= 32
    assert 180 <= percentile(samples, 99) <= 220
    assert max(samples) <= latency.cap_ms


def test_a_head_answers_what_s3_answers() -> None:
    """S3Storage.head reads the size and the date (the coordinator's recheck of a ticket whose
    create may have applied, under overload, raised KeyError here before)."""
    kernel, s3 = _s3()
    storage = sim_storage(s3, "producer")
    found: list[Any] = []
    _in_actor(kernel, lambda: (storage.put("k", b"12345"), found.append(storage.head("k"))))
    assert found[0].size == 5 and found[0].last_modified_ms == s3.store.head("k").last_modified_ms


def test_the_meter_counts_every_request_by_role_and_kind() -> None:
    kernel, s3 = _s3()
    queue = Queue("q", storage=sim_storage(s3, "producer"), clock=SimClock(kernel))
    _in_actor(kernel, lambda: [queue.enqueue({"n": n}) for n in range(3)])
    assert s3.meter.by_kind("producer") == {"PUT": 3}
    assert len(s3.store.list("s3queue/q/msg/").entries) == 3


def test_rate_limit_refills_at_its_rate() -> None:
    limit = RateLimit(10.0, 1.0, now_ms=0.0)
    assert all(limit.take(0.0) for _ in range(10))
    assert not limit.take(0.0)
    assert limit.take(100.0)  # 100 ms at 10/s: one token back
    assert not limit.take(100.0)


def test_writes_above_the_prefix_rate_get_slowdown_and_the_core_a_storage_error() -> None:
    # GIVEN a prefix that takes no write at all
    kernel, s3 = _s3(writes_per_s=0.001)
    queue = Queue("q", storage=sim_storage(s3, "producer"), clock=SimClock(kernel))
    raised: list[Exception] = []

    def body() -> None:
        try:
            queue.enqueue({"n": 1})
        except StorageError as exc:
            raised.append(exc)

    # WHEN a producer enqueues
    _in_actor(kernel, body)
    # THEN it gets the StorageError S3Storage raises once its retries are spent: a create is
    # never resent by the SDK, so S3Storage's 6 attempts each met one 503 and checked by HEAD
    assert len(raised) == 1
    assert isinstance(raised[0], Throttled) and "SlowDown" in str(raised[0])
    assert s3.meter.slowdowns[("producer", "PutObject")] == 6
    assert s3.meter.requests[("producer", "HeadObject")] == 6
    assert s3.meter.requests[("producer", "PutObject")] == 0


def test_a_plain_write_is_retried_by_the_sdk_too_and_reads_have_their_own_rate() -> None:
    kernel, s3 = _s3(writes_per_s=0.001)
    storage = sim_storage(s3, "worker")
    outcome: list[str] = []

    def body() -> None:
        try:
            storage.put("s3queue/q/tickets/1", b"t")
        except StorageError:
            outcome.append("refused")
        storage.get("s3queue/q/msg/1")  # reads have their own rate: admitted

    _in_actor(kernel, body)
    assert outcome == ["refused"]
    # botocore's 1 + 5 attempts inside each of S3Storage's 6
    assert s3.meter.slowdowns[("worker", "PutObject")] == 36
    assert s3.meter.requests[("worker", "GetObject")] == 1


def _timed_puts(kernel: Kernel, s3: SimS3, keys: list[str]) -> list[float]:
    storage = sim_storage(s3, "worker")
    done: list[float] = []

    def body() -> None:
        for key in keys:
            storage.put(key, b"x")
            done.append(kernel.now)

    _in_actor(kernel, body)
    return done


def test_a_new_prefix_shares_its_neighbours_rate_until_s3_splits() -> None:
    # GIVEN one write a second, a fresh bucket (one key range) and S3 slow to split
    kernel, s3 = _s3(writes_per_s=1.0)
    # WHEN two queues' folders each take a write
    done = _timed_puts(kernel, s3, ["s3queue/a/msg/1", "s3queue/b/msg/1"])
    # THEN the second waits for the first's token: folders are no partitions (AWS-FACTS)
    assert s3.meter.slowdowns[("worker", "PutObject")] >= 1
    assert done[1] - done[0] > 500
    assert s3.partitions.splits == []


def test_a_range_over_its_rate_long_enough_is_split_and_each_half_gets_the_full_rate() -> None:
    # GIVEN one write a second and S3 splitting a range after 5 s over its rate
    kernel, s3 = _s3(writes_per_s=1.0, split_after_s=5.0)
    # WHEN 8 writers to two folders keep it over its rate
    for w in range(8):
        storage = sim_storage(s3, "worker")
        folder = "ab"[w % 2]

        def body(storage: Any = storage, folder: str = folder, w: int = w) -> None:
            for n in range(6):
                with contextlib.suppress(StorageError):
                    storage.put(f"s3queue/{folder}/msg/{w}-{n}", b"x")

        kernel.spawn(body, at_ms=0.0, name=f"w{w}", role="worker")
    kernel.run(600_000.0)
    kernel.stop()
    # THEN S3 split the range within the keys it carried, not before 5 s of refusals
    assert s3.partitions.splits
    at_ms, boundary = s3.partitions.splits[0]
    assert at_ms >= 5_000
    assert "s3queue/a/msg/0-0" < boundary <= "s3queue/b/msg/7-5"
    assert s3.partitions.of("s3queue/a/msg/0-0") is not s3.partitions.of("s3queue/b/msg/7-5")


def test_a_presplit_bucket_gives_each_range_its_own_rate() -> None:
    # GIVEN a bucket S3 already split at queue b's folder
    kernel, s3 = _s3(writes_per_s=1.0, presplit=("s3queue/b/",))
    # WHEN each side takes a write at once
    done = _timed_puts(kernel, s3, ["s3queue/a/msg/1", "s3queue/b/msg/1"])
    # THEN neither waited for the other
    assert s3.meter.slowdowns[("worker", "PutObject")] == 0
    assert done[1] - done[0] < 500


def test_a_burst_above_the_rate_is_throttled_and_then_served() -> None:
    # GIVEN 20 writes/s: a burst of 40 PUTs at one instant from 40 producers
    kernel, s3 = _s3(writes_per_s=20.0)
    failures: list[Exception] = []
    for n in range(40):
        storage = sim_storage(s3, "producer")

        def body(storage: Any = storage, n: int = n) -> None:
            try:
                storage.put(f"s3queue/q/msg/{n:03d}", b"x", if_none_match=True, token=f"t{n}")
            except StorageError as exc:
                failures.append(exc)

        kernel.spawn(body, at_ms=0.0, name=f"p{n}", role="producer")
    kernel.run(600_000.0)
    kernel.stop()
    # THEN some met SlowDown, every write landed in the end (the retries wait for the rate)
    assert sum(s3.meter.slowdowns.values()) > 0
    assert not failures
    assert len(s3.store.list("s3queue/q/msg/").entries) == 40


# -- simulated Lambda --------------------------------------------------------------------------


def _service(**model: Any) -> tuple[Kernel, LambdaService]:
    kernel = Kernel(0.0)
    return kernel, LambdaService(kernel, replace(LambdaModel(), **model), random.Random(2))


def _function(kernel: Kernel, log: list[tuple[str, float]], **kw: Any) -> SimFunction:
    def body(event: dict[str, Any], context: Any, container: Any) -> None:
        log.append((event["n"], kernel.now))
        kernel.wait(2_000.0, "handler")

    params: dict[str, Any] = {"memory_mb": 1024, "timeout_s": 60.0, "reserved": 1}
    params["max_event_age_s"] = 300.0
    params.update(kw)
    return SimFunction("worker_q", "worker", body, object, **params)


def test_invoker_starts_the_function_and_a_throttled_event_runs_later() -> None:
    # GIVEN a worker with reserved concurrency 1 and the real LambdaInvoker on the sim client
    kernel, service = _service()
    log: list[tuple[str, float]] = []
    fn = service.add(_function(kernel, log))
    invoker = LambdaInvoker(SimLambdaClient(service), {"q": "worker_q"})
    # WHEN two tickets are invoked at once
    kernel.spawn(
        lambda: [invoker({"queue": "q", "ticket": t, "n": t}) for t in ("a", "b")],
        at_ms=0.0,
        name="coordinator",
        role="coordinator",
    )
    kernel.run(60_000.0)
    kernel.stop()
    # THEN the first ran at once (cold), the second was throttled and ran after it (warm)
    assert [n for n, _ in log] == ["a", "b"]
    assert log[0][1] < 2_000 < log[1][1]
    assert fn.throttles >= 1
    assert fn.cold_starts == 1
    assert fn.invocations == 2
    assert fn.peak == 1
    assert service.invoke_requests == 2
    assert fn.gb_s() == pytest.approx(4.0, rel=0.01)  # 2 x 2 s at 1 GB


def test_an_event_throttled_past_its_maximum_age_is_dropped() -> None:
    kernel, service = _service()
    log: list[tuple[str, float]] = []
    fn = service.add(_function(kernel, log, max_event_age_s=5.0))
    fn.running = fn.reserved or 0  # concurrency used up by someone else, for good
    kernel.call_at(0.0, lambda: service.submit("worker_q", {"n": "x"}))
    kernel.run(60_000.0)
    kernel.stop()
    assert log == []
    assert fn.dropped == 1
    assert fn.throttles >= 3  # retried after 1, 2 and 4 s


def test_account_concurrency_caps_every_function() -> None:
    kernel, service = _service(account_concurrency=2)
    log: list[tuple[str, float]] = []
    fn = service.add(_function(kernel, log, reserved=None))
    for n in range(3):
        kernel.call_at(0.0, lambda n=n: service.submit("worker_q", {"n": str(n)}))
    kernel.run(1_000.0)
    assert fn.peak == 2
    assert len(log) == 2
    kernel.stop()


def test_the_default_model_cites_its_sources() -> None:
    for latency in (AWS.s3.put, AWS.s3.get, AWS.s3.list, AWS.lam.invoke, AWS.lam.cold_start):
        assert latency.source
    assert AWS.s3.writes_per_s == 3_500
    assert AWS.s3.reads_per_s == 5_500


def test_settings_for_a_variant_go_on_top_of_the_base() -> None:
    from bench.simworld import settings_from

    base = settings_from("concurrency=32")
    variant = settings_from("batch_size=100,visibility_timeout=45.5", base)
    assert (variant.concurrency, variant.batch_size, variant.visibility_timeout) == (32, 100, 45.5)


# -- group commit in virtual time ----------------------------------------------------------------


class _FailingPuts(MemoryStorage):
    def put(self, *args: Any, **kwargs: Any) -> str:
        raise StorageError("PUT failed")


def _callers(kernel: Kernel, batch: Any, n: int, at_ms: float = 0.0) -> dict[int, Any]:
    """`n` actors that each enqueue one message through `batch` at `at_ms`: id or error, and
    the virtual ms the call took."""
    seen: dict[int, Any] = {}

    def call(i: int) -> None:
        start = kernel.now
        try:
            seen[i] = (batch.enqueue({"i": i}), kernel.now - start)
        except StorageError as exc:
            seen[i] = (exc, kernel.now - start)

    for i in range(n):
        kernel.spawn(lambda i=i: call(i), at_ms=at_ms, name=f"c{i}", role="producer")
    return seen


def test_group_commit_waits_its_window_in_virtual_time() -> None:
    # GIVEN 8 callers at once and, later, one alone, through one batcher with a 50 ms window
    kernel, s3 = _s3()
    queue = Queue("q", storage=sim_storage(s3, "producer"), clock=SimClock(kernel))
    batch = queue.batching(window=0.05)
    together = _callers(kernel, batch, 8)
    alone = _callers(kernel, batch, 1, at_ms=1_000.0)
    # WHEN virtual time runs
    kernel.run(10_000.0)
    kernel.stop()
    # THEN the 8 shared one PUT, the lone caller wrote alone, and each call lasted its window
    # (virtual) plus its PUT: the waits passed on the simulated clock
    assert s3.meter.by_kind("producer") == {"PUT": 2}
    assert len({ident for ident, _ in together.values()}) == 8
    assert all(50 < ms < 2_100 for _, ms in [*together.values(), *alone.values()])
    assert kernel.errors == []


def test_group_commit_failed_put_raises_in_every_caller_it_carried() -> None:
    # GIVEN a storage whose PUTs fail, and 4 callers sharing a batch
    kernel = Kernel(0.0)
    queue = Queue("q", storage=_FailingPuts(), clock=SimClock(kernel))
    seen = _callers(kernel, queue.batching(window=0.05), 4)
    # WHEN the leader writes at the end of its window
    kernel.run(1_000.0)
    kernel.stop()
    # THEN every caller raised the PUT's error, 50 ms (virtual) after it called
    assert [type(error) for error, _ in seen.values()] == [StorageError] * 4
    assert [ms for _, ms in seen.values()] == [50.0] * 4


def test_group_commit_run_reports_consistent_figures() -> None:
    # GIVEN a tiny group-commit load: 16 callers, 200 msg/s, 50 ms window
    load = Load(callers=16, window_s=0.05, offered_per_s=200.0, warmup_s=1.0, seconds=2.0)
    # WHEN it runs on the simulated region and drains
    result = simgroup.run(load, AWS, QueueSettings())
    # THEN every message enqueued (at most the 600 offered: callers behind their schedule
    # offer less) started, objects carried more than one message each, and the requests by
    # kind and by role add up to the total
    assert result["errors"] == [] and result["enqueue_failures"] == 0
    assert 0 < result["started"] == result["enqueued"] == result["messages"] <= 600
    assert result["objects"] < result["enqueued"]
    assert result["messages_per_object"] > 1
    assert result["per_message_by_role"]["producer"] == pytest.approx(
        result["objects"] / result["messages"], abs=1e-4
    )
    per = result["per_message"]
    kinds = sum(per[k] for k in ("PUT", "GET", "HEAD", "LIST", "DELETE"))
    assert kinds == pytest.approx(per["total"], abs=1e-3)
    assert sum(result["per_message_by_role"].values()) == pytest.approx(per["total"], abs=1e-3)
    usd = result["usd_per_million"]
    s3_usd = sum(
        v for kinds in result["s3_usd_per_million_by_role"].values() for v in kinds.values()
    )
    assert s3_usd == pytest.approx(usd["s3_requests"], abs=1e-3)
    parts = (
        usd["s3_requests"] + usd["lambda_requests"] + usd["lambda_duration"] + usd["eventbridge"]
    )
    assert parts == pytest.approx(usd["total"], abs=1e-3)
    call = result["enqueue_call_ms"]
    assert 50 <= call["p50"] <= call["p99"] and call["count"] > 0
    assert result["latency_ms"]["p50"] >= call["p50"]


def _overloaded_producers(
    pacing: Pacing,
    *,
    producers: int = 40,
    writes_per_s: float = 50.0,
    each: int = 50,
    per_s: float = 4.0,
    until_s: float = 3_600.0,
) -> tuple[int, int, int]:
    """`producers` (one client, as in one process) offering `per_s` creates a second each,
    `each` in all, to a prefix that takes `writes_per_s`, for `until_s` virtual seconds:
    (creates written, 503 answers, enqueues that raised Throttled)."""
    kernel, s3 = _s3(writes_per_s=writes_per_s)
    storage = sim_storage(s3, "producer", pacing=pacing)
    failures: list[Exception] = []
    for n in range(producers):

        def body(n: int = n) -> None:
            for k in range(each):
                due = (k * producers + n) / (per_s * producers) * 1000
                if due > kernel.now:
                    kernel.wait(due - kernel.now, "schedule")
                try:
                    storage.put(f"s3queue/q/msg/{n:03d}-{k:03d}", b"x", if_none_match=True)
                except Throttled as exc:
                    failures.append(exc)

        kernel.spawn(body, at_ms=0.0, name=f"p{n}", role="producer")
    kernel.run(until_s * 1000)
    kernel.stop()
    written = sum(1 for _ in iter_keys(s3.store, "s3queue/q/msg/"))
    return written, sum(s3.meter.slowdowns.values()), len(failures)


def test_paced_producers_slow_down_instead_of_hammering_a_throttled_prefix() -> None:
    # GIVEN producers offering 4x what the prefix takes, WHEN their client paces itself as
    # Queue's own client does, or not at all
    standard = _overloaded_producers("none")
    paced = _overloaded_producers("s3queue")
    # THEN every write either landed or raised Throttled (nothing silently lost), and the
    # paced client met far fewer 503s for as many writes or more
    for written, _, failed in (standard, paced):
        assert written + failed == 2000
    assert paced[1] < standard[1] / 2
    assert paced[0] >= standard[0]


def test_senders_throttled_in_their_first_half_second_keep_the_prefix_busy() -> None:
    # GIVEN 200 senders on one client offering 2,000 creates a second to a prefix that takes
    # 500: its one-second burst is gone and the first 503 comes ~0.3 s in, before botocore's
    # adaptive limiter has measured anything (producing/pacing.py)
    boto, paced = (
        _overloaded_producers(
            pacing, producers=200, writes_per_s=500.0, each=100, per_s=10.0, until_s=4.0
        )
        for pacing in ("botocore", "s3queue")
    )
    # THEN in 4 s the pacer keeps the prefix near its 500 a second, where botocore's limiter
    # fell to its floor (0.5 a second) and crept back as 0.4 t^3
    assert paced[0] >= 0.8 * 500 * 4
    assert boto[0] < paced[0] / 2


def test_after_the_split_each_shard_of_a_queue_is_a_partition_of_its_own() -> None:
    """`simshards.split_points`: S3's ranges once it has split a sharded queue's load. Each
    shard's keys (time-ordered tails) fall in a range of their own, apart from the tickets."""
    kernel, s3 = _s3(presplit=simshards.split_points("q00", 4))
    keys = QueueKeys("s3queue", "q00")
    tails = [keys.sharded(k).msg + "9999999999999-Z" for k in range(4)]
    ranges = {id(s3.partitions.of(key)) for key in [*tails, keys.ticket(1, 1), keys.lease]}
    assert len(ranges) == 4 + 2
    kernel.stop()


def test_a_sim_lock_held_across_a_virtual_wait_makes_the_next_actor_wait_not_the_world() -> None:
    # GIVEN two actors that take one lock around a 50 ms S3 call (Publisher.doubting)
    kernel = Kernel(0.0)
    lock = SimLock(kernel)
    held: list[tuple[str, float, float]] = []

    def body(name: str) -> None:
        with lock:
            start = kernel.now
            kernel.wait(50.0, "PutObject")
            held.append((name, start, kernel.now))

    for name in ("a", "b"):
        kernel.spawn(lambda name=name: body(name), at_ms=0.0, name=name, role="coordinator")
    # WHEN virtual time runs (a threading.Lock here froze the simulation)
    kernel.run(1_000.0)
    kernel.stop()
    # THEN the second held it only after the first let go
    assert [h[0] for h in held] == ["a", "b"] and held[1][1] >= held[0][2] == 50.0


def test_a_world_deploys_its_coordinator_at_the_memory_it_is_given() -> None:
    from bench.simworld import COORDINATOR_MEMORY, World, WorldConfig

    for memory in (COORDINATOR_MEMORY, simshards.COORDINATOR_MEMORY):
        world = World(WorldConfig(coordinator_memory=memory), AWS)
        try:
            assert world.lam.functions["coordinator"].memory_mb == memory
        finally:
            world.stop()

"""The deployment rehearsal: the synthesized stack, run the way Lambda would, against SeaweedFS.

The stack is synthesized into ``cdk.out``; every Lambda function of the assembly (nested
stacks included) runs in its own process per invocation with its asset as the task root, the
layer asset's ``python/`` on the path and exactly the template's environment (tokens resolved
for one account and region), plus what Lambda sets and two endpoint redirects
(``AWS_ENDPOINT_URL_S3`` to SeaweedFS, ``AWS_ENDPOINT_URL_LAMBDA`` to a stand-in that routes
the coordinator's ``Invoke`` calls to the workers, no more at once than their reserved
concurrency). The schedule rule's target is invoked as EventBridge would. Every SDK call is
recorded and checked against the calling function's role policy in the template.

Run it alone with ``make rehearsal`` (``pytest -m rehearsal``); it is part of ``make test``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from cdk_support import CDK_CONTEXT
from lambda_service import LambdaService
from rehearsal import ACCOUNT, REGION, Deployment, allowed, emf_values, requests_of
from s3queue import Queue
from s3queue.contract import metric_names
from s3queue.contract.discovery import discover_handlers
from s3queue_cdk.app import build
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = [pytest.mark.cdk, pytest.mark.s3, pytest.mark.rehearsal]

PREFIX = "s3queue"
GOOD = {
    "send_email": [
        {"to": f"user{i}@example.com", "template": "welcome", "name": "U"} for i in range(3)
    ],
    "generate_report": [{"values": [i, i + 1.5, 7]} for i in range(3)],
}
BAD = {"to": "not-an-address", "template": "welcome", "name": "X"}
MAX_RUNS = 4
HANDLER_QUEUES = sorted(discover_handlers(FUNCTIONS_DIR / "handlers"))


@dataclass
class Rehearsed:
    deployment: Deployment
    service: LambdaService
    bucket: str
    client: Any
    runs: int


def scheduled_event() -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": "2026-01-01T12:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": {},
    }


def live_keys(client: Any, bucket: str, queue: str) -> list[str]:
    """What is still waiting or in flight in a queue: inbox/, msg/ and tickets/ objects."""
    found = []
    for segment in ("inbox/", "msg/", "tickets/"):
        listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/{queue}/{segment}")
        found += [o["Key"] for o in listing.get("Contents", [])]
    return [key for key in found if not key.endswith("/tickets/~controls")]  # switches: no work


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory: pytest.TempPathFactory, seaweed: Any) -> Iterator[Rehearsed]:
    # GIVEN the stack synthesized into cdk.out, and an empty bucket standing in for its own
    work = tmp_path_factory.mktemp("rehearsal")
    app = App(context=CDK_CONTEXT, outdir=str(work / "cdk.out"))
    stack = build(app)
    app.synth()
    bucket = f"rehearsal-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    bucket_id = stack.get_logical_id(stack.storage.bucket.node.default_child)  # type: ignore[arg-type]
    deployment = Deployment.read(work / "cdk.out", stack.stack_name, bucket_id, bucket)
    (work / "calls").mkdir()
    service = LambdaService(deployment, seaweed.endpoint_url, work / "calls")
    client = seaweed.make_client()
    # AND plain PUTs into two queues' inboxes, as another service would make them
    for queue, bodies in GOOD.items():
        for body in bodies:
            key = f"{PREFIX}/{queue}/inbox/{uuid.uuid4().hex}.json"
            client.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
    client.put_object(
        Bucket=bucket, Key=f"{PREFIX}/send_email/inbox/bad.json", Body=json.dumps(BAD).encode()
    )
    # AND one message per queue through the library: on SeaweedFS the idle probe cannot see
    # inbox/ alone (see test_an_idle_coordinator_sees_a_plain_put_alone)
    for queue, bodies in GOOD.items():
        Queue(queue, bucket=bucket, s3=client).enqueue(bodies[0])
    # WHEN the schedule rule starts the coordinator until both queues are drained
    runs = 0
    try:
        while runs < MAX_RUNS and any(live_keys(client, bucket, q) for q in GOOD):
            for target in deployment.schedule_targets:
                service.invoke(deployment.by_arn(target).name, scheduled_event())
            service.join()
            runs += 1
        yield Rehearsed(deployment, service, bucket, client, runs)
    finally:
        service.close()


def worker_lines(rehearsed: Rehearsed, queue: str) -> list[str]:
    name = f"S3Queue_{queue}"
    return [line for i in rehearsed.service.invocations if i.function == name for line in i.stdout]


def test_every_invocation_succeeded(rehearsed: Rehearsed) -> None:
    invocations = rehearsed.service.invocations
    assert {i.function for i in invocations} >= {"S3Queue_send_email", "S3Queue_generate_report"}
    for invocation in invocations:
        assert invocation.returncode == 0, (invocation.function, invocation.stderr[-2000:])
        assert invocation.result is not None


def test_plain_puts_are_processed_end_to_end(rehearsed: Rehearsed) -> None:
    for queue, bodies in GOOD.items():
        assert live_keys(rehearsed.client, rehearsed.bucket, queue) == []
        processed = emf_values(
            worker_lines(rehearsed, queue),
            metric_names.NAMESPACE,
            metric_names.PROCESSED,
            metric_names.dimensions(queue),
        )
        assert processed == len(bodies) + 1, queue  # the plain PUTs and the library's one
    assert rehearsed.runs <= MAX_RUNS


def test_a_bad_message_reaches_the_dlq_with_its_error(rehearsed: Rehearsed) -> None:
    listing = rehearsed.client.list_objects_v2(
        Bucket=rehearsed.bucket, Prefix=f"{PREFIX}/send_email/dlq/"
    )
    (entry,) = listing["Contents"]
    body = rehearsed.client.get_object(Bucket=rehearsed.bucket, Key=entry["Key"])["Body"].read()
    assert b"invalid e-mail address" in body
    assert b"PermanentError" in body
    empty = rehearsed.client.list_objects_v2(
        Bucket=rehearsed.bucket, Prefix=f"{PREFIX}/generate_report/dlq/"
    )
    assert "Contents" not in empty


def test_the_dead_letter_alarm_metric_shows_it(rehearsed: Rehearsed) -> None:
    alarm = rehearsed.deployment.alarms["S3Queue-send_email-dead-letters"]
    (lettered,) = [m for m in alarm["Metrics"] if m["Id"] == "lettered"]
    metric = lettered["MetricStat"]["Metric"]
    dimensions = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
    value = emf_values(
        worker_lines(rehearsed, "send_email"), metric["Namespace"], metric["MetricName"], dimensions
    )
    assert lettered["MetricStat"]["Stat"] == "Sum"
    assert value == 1 > alarm["Threshold"]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_every_call_is_allowed_by_the_callers_role_policy(rehearsed: Rehearsed) -> None:
    calls = rehearsed.service.calls()
    coordinator = rehearsed.deployment.by_arn(rehearsed.deployment.schedule_targets[0]).name
    assert {"S3Queue_send_email", "S3Queue_generate_report", coordinator} <= set(calls)
    invokes = [c for c in calls[coordinator] if c["operation"] == "Invoke"]
    assert invokes, "the coordinator invoked the workers through the Lambda API"
    records = [
        c
        for c in calls["S3Queue_send_email"]
        if c["params"].get("Key", "").startswith(f"{PREFIX}/_idempotency/send_email/")
    ]
    assert records, "send_email kept its idempotency records in the bucket"
    for name, made in calls.items():
        statements = rehearsed.deployment.functions[name].statements
        for call in made:
            for action, resource, context in requests_of(call, rehearsed.bucket):
                assert allowed(statements, action, resource, context), (name, call)


def test_probes_of_another_queue_are_denied(rehearsed: Rehearsed) -> None:
    bucket = f"arn:aws:s3:::{rehearsed.bucket}"
    worker_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:"
    for queue, other in (("send_email", "generate_report"), ("generate_report", "send_email")):
        statements = rehearsed.deployment.functions[f"S3Queue_{queue}"].statements
        mine = f"{bucket}/{PREFIX}/{queue}/msg/x"
        assert allowed(statements, "s3:GetObject", mine, {})  # the control: its own prefix
        records = f"{bucket}/{PREFIX}/_idempotency/{queue}/fn/x"
        assert allowed(statements, "s3:PutObject", records, {})  # and its own records
        for action, resource, context in [
            ("s3:GetObject", f"{bucket}/{PREFIX}/{other}/msg/x", {}),
            ("s3:PutObject", f"{bucket}/{PREFIX}/{other}/inbox/x", {}),
            ("s3:DeleteObject", f"{bucket}/{PREFIX}/{other}/tickets/x", {}),
            ("s3:ListBucket", bucket, {"s3:prefix": f"{PREFIX}/{other}/"}),
            ("s3:PutObject", f"{bucket}/{PREFIX}/_idempotency/{other}/fn/x", {}),
            ("s3:ListBucket", bucket, {"s3:prefix": f"{PREFIX}/_idempotency/{other}/"}),
            ("s3:ListBucket", bucket, {}),
            ("lambda:InvokeFunction", f"{worker_arn}S3Queue_{other}", {}),
        ]:
            assert not allowed(statements, action, resource, context), (queue, action, resource)


def test_the_coordinator_reaches_nothing_outside_the_stack(rehearsed: Rehearsed) -> None:
    coordinator = rehearsed.deployment.by_arn(rehearsed.deployment.schedule_targets[0])
    bucket = f"arn:aws:s3:::{rehearsed.bucket}"
    statements = coordinator.statements
    arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:"
    assert allowed(statements, "lambda:InvokeFunction", f"{arn}S3Queue_send_email", {})
    for action, resource, context in [
        ("s3:GetObject", f"{bucket}/other/x", {}),
        ("s3:ListBucket", bucket, {"s3:prefix": "other/"}),
        ("s3:ListBucket", bucket, {}),
        ("lambda:InvokeFunction", f"{arn}S3Queue-dev_send_email", {}),
        ("lambda:InvokeFunction", f"{arn}{coordinator.name}", {}),
    ]:
        assert not allowed(statements, action, resource, context), (action, resource)


def test_workers_never_ran_above_their_reserved_concurrency(rehearsed: Rehearsed) -> None:
    for name, most in rehearsed.service.most_at_once.items():
        limit = rehearsed.deployment.functions[name].concurrency
        assert limit is not None and 1 <= most <= limit, name


def test_an_idle_coordinator_sees_a_plain_put_alone(rehearsed: Rehearsed) -> None:
    # GIVEN drained queues and one plain PUT, nothing else
    assert not any(live_keys(rehearsed.client, rehearsed.bucket, q) for q in GOOD)
    body = json.dumps(GOOD["generate_report"][0]).encode()
    key = f"{PREFIX}/generate_report/inbox/alone.json"
    rehearsed.client.put_object(Bucket=rehearsed.bucket, Key=key, Body=body)
    # WHEN the schedule starts the coordinator once
    deployment, service = rehearsed.deployment, rehearsed.service
    try:
        service.invoke(deployment.by_arn(deployment.schedule_targets[0]).name, scheduled_event())
        service.join()
        # THEN the message was dispatched and handled
        assert live_keys(rehearsed.client, rehearsed.bucket, "generate_report") == []
    finally:
        rehearsed.client.delete_object(Bucket=rehearsed.bucket, Key=key)


def test_the_assets_ran_not_the_checkout(rehearsed: Rehearsed) -> None:
    layer = rehearsed.deployment.layer_python
    assert layer is not None and (layer / "s3queue" / "dispatching" / "coordinator.py").is_file()
    for function in rehearsed.deployment.functions.values():
        assert Path(function.task_root).is_dir()
        assert "cdk.out" in str(function.task_root)


def test_a_paused_queue_waits_through_a_coordinator_run(rehearsed: Rehearsed) -> None:
    # GIVEN drained queues, then a paused queue with a message in it
    client, bucket = rehearsed.client, rehearsed.bucket
    assert not any(live_keys(client, bucket, q) for q in GOOD)
    queue = Queue("generate_report", bucket=bucket, s3=client)
    queue.pause()
    queue.enqueue(GOOD["generate_report"][0])
    deployment, service = rehearsed.deployment, rehearsed.service
    coordinator = deployment.by_arn(deployment.schedule_targets[0]).name
    workers_before = len(worker_lines(rehearsed, "generate_report"))
    try:
        # WHEN the schedule starts the coordinator
        service.invoke(coordinator, scheduled_event())
        service.join()
        # THEN the run ended without dispatching it: no worker ran, the message waits
        assert len(worker_lines(rehearsed, "generate_report")) == workers_before
        assert [k for k in live_keys(client, bucket, "generate_report") if "/msg/" in k]
        assert not [k for k in live_keys(client, bucket, "generate_report") if "/tickets/" in k]
        assert queue.stats()["held"]["paused"] == 1
        # WHEN it is resumed, the next run dispatches and handles it
        queue.resume()
        service.invoke(coordinator, scheduled_event())
        service.join()
        assert live_keys(client, bucket, "generate_report") == []
    finally:
        queue.resume()


def test_every_handler_and_its_packages_load_from_the_workers_asset(rehearsed: Rehearsed) -> None:
    # GIVEN every worker of the deployment, one of them a handler importing `humanize` (a
    # package of functions/handlers/requirements.txt, not of the layer; the test's own
    # virtualenv has it too, behind the asset on sys.path)
    workers = {
        name: f
        for name, f in rehearsed.deployment.functions.items()
        if f.handler.startswith("worker")
    }
    assert {f"S3Queue_{queue}" for queue in HANDLER_QUEUES} == set(workers)
    loaded = {}
    for name, function in workers.items():
        # WHEN Lambda starts it with an event holding no ticket (the handler module loads)
        invocation = rehearsed.service.invoke(name, {"tickets": []})
        assert invocation.returncode == 0, (name, invocation.stderr[-2000:])
        # THEN its handler module, and every package it imported, came from its code asset
        queue = function.environment["S3QUEUE_QUEUE"]
        assert invocation.modules[f"handlers.{queue}"].startswith(str(function.task_root))
        loaded[queue] = invocation.modules
    task_root = rehearsed.deployment.functions["S3Queue_generate_report"].task_root
    assert loaded["generate_report"]["humanize"].startswith(str(task_root))
    assert (task_root / "humanize").is_dir()

"""The deployment rehearsal of a scheduled queue: the synthesized coordinator Lambda enqueues
the due slot (with cronsim from the layer asset), once, though EventBridge started it twice."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from cdk_support import CDK_CONTEXT
from lambda_service import LambdaService
from rehearsal import Deployment, emf_values
from s3queue.contract import metric_names
from s3queue.contract.schedule import Schedule, slot_id
from s3queue_cdk.app import build
from test_cdk_schedules import functions_with
from test_rehearsal import PREFIX, live_keys, scheduled_event

pytestmark = [pytest.mark.cdk, pytest.mark.s3, pytest.mark.rehearsal]

MORE_RUNS = 2


def test_two_coordinator_runs_enqueue_the_due_slot_once(tmp_path: Path, seaweed: Any) -> None:
    # GIVEN the stack with a queue due every minute, synthesized, and an empty bucket
    functions = functions_with(tmp_path, '{"schedule": "* * * * *"}')
    app = App(context=CDK_CONTEXT, outdir=str(tmp_path / "cdk.out"))
    stack = build(app, functions_dir=functions)
    app.synth()
    bucket = f"rehearsal-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    bucket_id = stack.get_logical_id(stack.storage.bucket.node.default_child)  # type: ignore[arg-type]
    deployment = Deployment.read(tmp_path / "cdk.out", stack.stack_name, bucket_id, bucket)
    (tmp_path / "calls").mkdir()
    service = LambdaService(deployment, seaweed.endpoint_url, tmp_path / "calls")
    client = seaweed.make_client()
    first_slot = Schedule.parse("* * * * *").latest(round(time.time() * 1000))
    try:
        # WHEN the schedule rule starts the coordinator twice at once (EventBridge may)
        (target,) = deployment.schedule_targets
        for _ in range(2):
            service.invoke_async(deployment.by_arn(target).name, scheduled_event())
        service.join()
        # AND the next minute's runs, while something waits: a slot that fell due as both runs
        # were ending (quiet for their linger) is dispatched by the next one
        for _ in range(MORE_RUNS):
            if not live_keys(client, bucket, "heartbeat"):
                break
            service.invoke(deployment.by_arn(target).name, scheduled_event())
            service.join()
    finally:
        service.close()
    # THEN every run succeeded (cronsim came from the layer asset: lambda_bootstrap checks)
    for invocation in service.invocations:
        assert invocation.returncode == 0, (invocation.function, invocation.stderr[-2000:])
    # AND the due slot (and one more for each minute that began meanwhile) was enqueued once
    # and handled once, by the queue's worker
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/heartbeat/ids/")
    markers = sorted(o["Key"].rsplit("/", 1)[1] for o in listing.get("Contents", []))
    assert markers[0] == slot_id(first_slot) and len(markers) <= 1 + 1 + MORE_RUNS
    lines = [
        line for i in service.invocations if i.function == "S3Queue_heartbeat" for line in i.stdout
    ]
    processed = emf_values(
        lines, metric_names.NAMESPACE, metric_names.PROCESSED, metric_names.dimensions("heartbeat")
    )
    assert processed == len(markers)
    assert live_keys(client, bucket, "heartbeat") == []

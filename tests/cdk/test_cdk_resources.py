"""The stack's resources and their key properties, for the default and the all-options variant."""

from __future__ import annotations

import json

import pytest
from aws_cdk import assertions
from cdk_support import Synth, render
from s3queue import metric_names
from s3queue.config import (
    ENV_BUCKET,
    ENV_PREFIX,
    ENV_QUEUE,
    ENV_QUEUES,
    ENV_SETTINGS,
    Environment,
    QueueSettings,
)
from s3queue.discovery import discover_handlers
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = pytest.mark.cdk
Match = assertions.Match
HANDLERS = discover_handlers(FUNCTIONS_DIR / "handlers")


def test_queue_bucket_is_private_encrypted_logged_and_retained(default: Synth) -> None:
    bucket_id = default.logical_id(default.stack.storage.bucket)
    bucket = default.resources[bucket_id]
    assert bucket["DeletionPolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True
    )
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    logs_id = default.logical_id(default.stack.storage.access_logs)
    assert props["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": logs_id}
    assert "VersioningConfiguration" not in props
    assert "NotificationConfiguration" not in props
    assert "BucketName" not in props


def test_every_bucket_denies_plain_http_and_old_tls(default: Synth) -> None:
    policies = default.of_type("AWS::S3::BucketPolicy").values()
    assert len(policies) == 2
    for policy in policies:
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"NumericLessThan": {"s3:TlsVersion": 1.2}}
            for s in statements
        )


def test_lifecycle_expires_done_ids_and_dlq_per_queue(default: Synth) -> None:
    bucket_id = default.logical_id(default.stack.storage.bucket)
    rules = default.resources[bucket_id]["Properties"]["LifecycleConfiguration"]["Rules"]
    by_prefix = {rule.get("Prefix"): rule for rule in rules}
    for queue in HANDLERS:
        assert by_prefix[f"s3queue/{queue}/done/"]["ExpirationInDays"] == 7
        assert by_prefix[f"s3queue/{queue}/ids/"]["ExpirationInDays"] == 7
        assert by_prefix[f"s3queue/{queue}/dlq/"]["ExpirationInDays"] == 14
    assert by_prefix[None]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # Nothing that holds live work ever expires.
    live = ("/msg/", "/inbox/", "/tickets/")
    assert not [p for p in by_prefix if p and any(part in p for part in live)]


def test_variant_bucket_uses_kms_versioning_events_and_its_name(variant: Synth) -> None:
    storage = variant.stack.storage
    bucket = variant.resources[variant.logical_id(storage.bucket)]
    props = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Delete"
    assert storage.key is not None
    key_id = variant.logical_id(storage.key)
    assert variant.resources[key_id]["Properties"]["EnableKeyRotation"] is True
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["BucketKeyEnabled"] is True
    assert sse["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]},
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["NotificationConfiguration"] == {
        "EventBridgeConfiguration": {"EventBridgeEnabled": True}
    }
    assert render(props["BucketName"]) == "acme-queues-<AWS::AccountId>-<AWS::Region>"
    rules = {rule["Id"]: rule for rule in props["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-noncurrent-versions"]["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": 1
    }
    assert rules["send_email-dlq"] == {
        "Id": "send_email-dlq",
        "Prefix": "jobs/prod/send_email/dlq/",
        "ExpirationInDays": 30,
        "Status": "Enabled",
    }


def test_layer_and_public_powertools_layer(default: Synth) -> None:
    default.template.has_resource_properties(
        "AWS::Lambda::LayerVersion",
        {"CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["arm64"]},
    )
    layer_id = default.logical_id(
        default.stack.node.find_child("Layers").node.find_child("S3Queue")
    )
    for props in [default.coordinator(), *default.workers().values()]:
        powertools, s3queue = props["Layers"]
        assert render(powertools) == (
            "arn:aws:lambda:<AWS::Region>:017000801446:layer:"
            "AWSLambdaPowertoolsPythonV3-python312-arm64:27"
        )
        assert s3queue == {"Ref": layer_id}


def test_one_worker_per_handler_module_sized_by_its_settings(default: Synth) -> None:
    workers = default.workers()
    assert sorted(workers) == sorted(HANDLERS)
    for queue, props in workers.items():
        settings = HANDLERS[queue].settings
        assert props["Runtime"] == "python3.12"
        assert props["Architectures"] == ["arm64"]
        assert props["MemorySize"] == settings.memory
        assert props["Timeout"] == settings.timeout >= settings.visibility_timeout
        assert props["ReservedConcurrentExecutions"] == settings.concurrency
        assert props["TracingConfig"] == {"Mode": "Active"}
    assert len({json.dumps(p["Code"]) for p in workers.values()}) == 1, "one shared code asset"


def test_worker_environment_is_what_the_worker_reads(default: Synth) -> None:
    workers = default.workers()
    assert sorted(workers) == sorted(HANDLERS)
    for queue, props in workers.items():
        env = props["Environment"]["Variables"]
        assert set(env) == {
            ENV_BUCKET,
            ENV_PREFIX,
            ENV_QUEUE,
            ENV_SETTINGS,
            "POWERTOOLS_SERVICE_NAME",
            "POWERTOOLS_METRICS_NAMESPACE",
        }
        assert env["POWERTOOLS_SERVICE_NAME"] == metric_names.SERVICE
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == metric_names.NAMESPACE
        parsed = Environment.from_env({k: str(render(v)) for k, v in env.items()})
        assert parsed.queue == queue
        assert parsed.prefix == "s3queue"
        assert parsed.settings == HANDLERS[queue].settings


def test_coordinator_environment_names_every_worker(default: Synth) -> None:
    props = default.coordinator()
    env = props["Environment"]["Variables"]
    assert set(env) == {
        ENV_BUCKET,
        ENV_PREFIX,
        ENV_QUEUES,
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
    }
    parsed = Environment.from_env({k: str(render(v)) for k, v in env.items()})
    workers = default.stack.workers.by_queue
    assert sorted(parsed.queues) == sorted(HANDLERS)
    for queue, entry in parsed.queues.items():
        assert entry["function"] == f"<{default.logical_id(workers[queue].function)}>"
        assert QueueSettings.from_mapping(entry["settings"]) == HANDLERS[queue].settings


def test_coordinator_runs_every_minute_with_small_concurrency(default: Synth) -> None:
    props = default.coordinator()
    assert props["Handler"] == "app.handler"
    assert props["Runtime"] == "python3.12"
    assert 60 <= props["Timeout"] <= 120
    assert props["ReservedConcurrentExecutions"] in (1, 2)
    coordinator_id = default.logical_id(default.stack.coordinator.function)
    rules = default.of_type("AWS::Events::Rule")
    assert len(rules) == 1, "no object-created rule unless low latency is on"
    (rule,) = rules.values()
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert rule["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [coordinator_id, "Arn"]}
    default.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"FunctionName": {"Ref": coordinator_id}, "MaximumRetryAttempts": 0},
    )


def test_low_latency_starts_the_coordinator_on_new_messages(variant: Synth) -> None:
    bucket_id = variant.logical_id(variant.stack.storage.bucket)
    rules = [r["Properties"] for r in variant.of_type("AWS::Events::Rule").values()]
    (schedule,) = [r for r in rules if "ScheduleExpression" in r]
    assert schedule["ScheduleExpression"] == "rate(2 minutes)"
    (created,) = [r for r in rules if "EventPattern" in r]
    assert created["EventPattern"] == {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": [{"Ref": bucket_id}]},
            "object": {
                "key": [{"wildcard": "jobs/prod/*/msg/*"}, {"wildcard": "jobs/prod/*/inbox/*"}]
            },
        },
    }
    functions = [variant.coordinator(), *variant.workers().values()]
    assert not [p for p in functions if "ReservedConcurrentExecutions" in p]


def test_alarms_per_queue_and_for_the_coordinator(default: Synth) -> None:
    alarms = [a["Properties"] for a in default.of_type("AWS::CloudWatch::Alarm").values()]
    assert len(alarms) == 3 * len(HANDLERS) + 1
    topic_id = default.logical_id(default.stack.monitoring.topic)
    for alarm in alarms:
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    for queue in HANDLERS:
        dims = {"queue": queue, "service": metric_names.SERVICE}
        mine = {
            a["MetricName"]: a
            for a in alarms
            if {d["Name"]: d["Value"] for d in a.get("Dimensions", [])} == dims
        }
        dead, age = mine[metric_names.DEAD_LETTERS], mine[metric_names.OLDEST_MESSAGE_AGE]
        assert (dead["Namespace"], dead["Threshold"]) == (metric_names.NAMESPACE, 0)
        assert dead["ComparisonOperator"] == "GreaterThanThreshold"
        assert (age["Threshold"], age["ComparisonOperator"]) == (900, "GreaterThanThreshold")
    errors = [a for a in alarms if a["MetricName"] == "Errors"]
    assert len(errors) == len(HANDLERS) + 1
    assert {a["Namespace"] for a in errors} == {"AWS/Lambda"}


def test_topic_enforces_tls_and_subscribes_the_email(default: Synth, variant: Synth) -> None:
    for synth in (default, variant):
        (policy,) = synth.of_type("AWS::SNS::TopicPolicy").values()
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in str(s) for s in statements)
    assert not default.of_type("AWS::SNS::Subscription")
    variant.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )
    assert variant.stack.storage.key is not None
    key_id = variant.logical_id(variant.stack.storage.key)
    variant.template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}}
    )
    key_policy = variant.resources[key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any(s["Principal"] == {"Service": "cloudwatch.amazonaws.com"} for s in key_policy)


def test_dashboard_shows_every_metric_of_every_queue(default: Synth) -> None:
    (dashboard,) = default.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(render(dashboard["Properties"]["DashboardBody"]))
    for name in (*metric_names.COORDINATOR_METRICS, *metric_names.WORKER_METRICS):
        assert f'\\"{name}\\"' in body, name
    for queue in HANDLERS:
        assert f'\\"queue\\",\\"{queue}\\"' in body
    assert metric_names.NAMESPACE in body


def test_outputs_name_the_bucket_topic_and_dashboard(default: Synth) -> None:
    outputs = default.template.to_json()["Outputs"]
    assert {"BucketName", "AlarmTopicArn", "DashboardName"} <= set(outputs)

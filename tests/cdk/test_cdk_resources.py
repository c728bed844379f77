"""The stack's resources and their key properties, for the default and the all-options variant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import assertions
from cdk_support import Synth, render
from s3queue.contract import metric_names
from s3queue.contract.discovery import discover_handlers
from s3queue.contract.environment import (
    ENV_BUCKET,
    ENV_PREFIX,
    ENV_QUEUE,
    ENV_QUEUES,
    ENV_SETTINGS,
    Environment,
)
from s3queue.contract.settings import QueueSettings
from s3queue.contract.tracing import ENV_TRACE_CALLS
from s3queue.protocol.keys import QueueKeys
from s3queue_cdk.stack import FUNCTIONS_DIR
from s3queue_cdk.workers import deployed_settings

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


def test_lifecycle_expires_ids_and_dlq_per_queue(default: Synth) -> None:
    bucket_id = default.logical_id(default.stack.storage.bucket)
    rules = default.resources[bucket_id]["Properties"]["LifecycleConfiguration"]["Rules"]
    by_prefix = {rule.get("Prefix"): rule for rule in rules}
    for queue in HANDLERS:
        assert by_prefix[f"s3queue/{queue}/ids/"]["ExpirationInDays"] == 7
        assert by_prefix[f"s3queue/{queue}/dlq/"]["ExpirationInDays"] == 14
        # A dead letter's payload is expired by the same rule as the dead letter; no rule may
        # take blobs/, where a waiting message's payload lives (docs/protocol.md).
        keys = QueueKeys("s3queue", queue)
        dead = keys.dead(1_700_000_000_000, "m1")
        expiring = [p for p in by_prefix if p and keys.dead_payload(dead).startswith(p)]
        assert expiring == [f"s3queue/{queue}/dlq/"]
        assert not [p for p in by_prefix if p and keys.blob("x").startswith(p)]
    assert by_prefix[None]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # One rule for every queue's idempotency records, not one a queue.
    assert by_prefix["s3queue/_idempotency/"] == {
        "Id": "expire-idempotency-records",
        "Prefix": "s3queue/_idempotency/",
        "ExpirationInDays": 7,
        "Status": "Enabled",
    }
    assert len(rules) == 2 * len(HANDLERS) + 2
    assert not [p for p in by_prefix if p and "/done/" in p], "no rule for the dead done/ prefix"
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
    assert rules["expire-idempotency-records"] == {
        "Id": "expire-idempotency-records",
        "Prefix": "jobs/prod/_idempotency/",
        "ExpirationInDays": 3,
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
            "arn:<AWS::Partition>:lambda:<AWS::Region>:017000801446:layer:"
            "AWSLambdaPowertoolsPythonV3-python312-arm64:27"
        )
        assert s3queue in ({"Ref": layer_id}, {"Ref": "LayerArn"})


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
        assert parsed.settings == deployed_settings(HANDLERS[queue].settings, True)
        # No more tickets in flight than the worker may run at once.
        assert parsed.settings.max_in_flight_tickets <= props["ReservedConcurrentExecutions"]


def test_trace_calls_sets_every_function_to_load_the_xray_sdk(
    default: Synth, variant: Synth
) -> None:
    """Off by default (the environments above have no such variable: the functions keep
    Lambda's own segments and skip the SDK's import); `s3queue:traceCalls` sets it on all."""
    functions = [variant.coordinator(), *variant.workers().values()]
    assert len(functions) == 1 + len(HANDLERS)
    for props in functions:
        assert props["Environment"]["Variables"][ENV_TRACE_CALLS] == "1"
        assert props["TracingConfig"] == {"Mode": "Active"}
    assert ENV_TRACE_CALLS not in default.coordinator()["Environment"]["Variables"]


def test_the_coordinators_memory_is_a_deployment_setting(default: Synth, variant: Synth) -> None:
    """Its CPU follows its memory (docs/performance.md, session 19): 1,024 MB unless set, as
    the AWS simulation deploys it."""
    from bench.simworld import COORDINATOR_MEMORY, COORDINATOR_TIMEOUT_S

    assert default.coordinator()["MemorySize"] == COORDINATOR_MEMORY == 1024
    assert default.coordinator()["Timeout"] == COORDINATOR_TIMEOUT_S
    assert variant.coordinator()["MemorySize"] == 1769


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
    workers = default.workers()
    assert sorted(parsed.queues.functions) == sorted(HANDLERS)
    for queue, function in parsed.queues.functions.items():
        assert function == workers[queue]["FunctionName"]
        assert parsed.queues.settings[queue] == deployed_settings(HANDLERS[queue].settings, True)
        assert parsed.queues.settings[queue].max_in_flight_tickets <= QueueSettings().concurrency


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


def metric_ids(alarm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A metric-math alarm's metrics by id: namespace, name, dimensions and statistic."""
    found = {}
    for query in alarm.get("Metrics", []):
        if "MetricStat" in query:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            found[query["Id"]] = {
                "name": metric["MetricName"],
                "namespace": metric["Namespace"],
                "dims": {d["Name"]: render(d["Value"]) for d in metric.get("Dimensions", [])},
                "stat": stat["Stat"],
            }
    return found


def alarms_by_name(synth: Synth) -> dict[str, dict[str, Any]]:
    return {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in synth.of_type("AWS::CloudWatch::Alarm").values()
    }


def test_every_alarm_notifies_the_topic(default: Synth) -> None:
    alarms = alarms_by_name(default)
    assert len(alarms) == 3 * len(HANDLERS) + 2
    topic_id = default.logical_id(default.stack.monitoring.topic)
    for alarm in alarms.values():
        assert render(alarm["AlarmActions"]) in ([f"<{topic_id}>"], ["<TopicArn>"])


def test_a_dead_letter_fires_the_alarm_whenever_it_happens(default: Synth) -> None:
    for queue in HANDLERS:
        alarm = alarms_by_name(default)[f"S3Queue-{queue}-dead-letters"]
        dims = {"queue": queue, "service": metric_names.SERVICE}
        metrics = metric_ids(alarm)
        # the workers' count of moves, summed: published when it happens, idle or not
        assert metrics["lettered"] == {
            "name": metric_names.DEAD_LETTERED,
            "namespace": metric_names.NAMESPACE,
            "dims": dims,
            "stat": "Sum",
        }
        assert metrics["letters"]["name"] == metric_names.DEAD_LETTERS
        (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
        assert expression["Expression"] == "FILL(lettered, 0) + FILL(letters, 0)"
        assert expression["ReturnData"] is True
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        assert alarm["TreatMissingData"] == "notBreaching"


def test_the_worker_alarm_sums_errors_throttles_and_dropped_events(default: Synth) -> None:
    for queue in HANDLERS:
        alarm = alarms_by_name(default)[f"S3Queue-{queue}-worker"]
        metrics = metric_ids(alarm)
        assert {m["name"] for m in metrics.values()} == {
            "Errors",
            "Throttles",
            "AsyncEventsDropped",
        }
        for metric in metrics.values():
            assert metric["namespace"] == "AWS/Lambda"
            assert metric["dims"] == {"FunctionName": f"S3Queue_{queue}"}
        assert alarm["Threshold"] == 1


def test_a_silent_coordinator_raises_an_alarm(default: Synth) -> None:
    alarm = alarms_by_name(default)["S3Queue-coordinator-silent"]
    assert alarm["MetricName"] == "Invocations"
    assert render(alarm["Dimensions"]) == [
        {
            "Name": "FunctionName",
            "Value": f"<{default.logical_id(default.stack.coordinator.function)}>",
        }
    ]
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert alarm["TreatMissingData"] == "breaching"


def test_age_alarm_threshold(default: Synth) -> None:
    for queue in HANDLERS:
        age = alarms_by_name(default)[f"S3Queue-{queue}-oldest-message-age"]
        assert (age["Threshold"], age["ComparisonOperator"]) == (900, "GreaterThanThreshold")
        assert age["MetricName"] == metric_names.OLDEST_MESSAGE_AGE


def test_topic_enforces_tls_and_lets_only_this_accounts_alarms_publish(
    default: Synth, variant: Synth
) -> None:
    for synth in (default, variant):
        (policy,) = synth.of_type("AWS::SNS::TopicPolicy").values()
        statements = render(policy["Properties"]["PolicyDocument"]["Statement"])
        assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in str(s) for s in statements)
        (allow,) = [s for s in statements if s["Effect"] == "Allow"]
        topic = f"<{synth.logical_id(synth.stack.monitoring.topic)}>"
        assert allow == {
            "Sid": "AllowCloudWatchAlarms",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish",
            "Resource": topic,
            "Condition": {
                "StringEquals": {"aws:SourceAccount": "<AWS::AccountId>"},
                "ArnLike": {
                    "aws:SourceArn": "arn:<AWS::Partition>:cloudwatch:<AWS::Region>:"
                    "<AWS::AccountId>:alarm:*"
                },
            },
        }
    assert not default.of_type("AWS::SNS::Subscription")
    variant.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def test_under_kms_the_key_serves_only_this_accounts_alarms_and_logs(variant: Synth) -> None:
    assert variant.stack.storage.key is not None
    key_id = variant.logical_id(variant.stack.storage.key)
    variant.template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}}
    )
    key_policy = render(variant.resources[key_id]["Properties"]["KeyPolicy"]["Statement"])
    (cloudwatch,) = [
        s for s in key_policy if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert cloudwatch["Condition"]["StringEquals"] == {"aws:SourceAccount": "<AWS::AccountId>"}
    (logs,) = [s for s in key_policy if "logs." in str(s["Principal"])]
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]
    log_groups = variant.of_type("AWS::Logs::LogGroup").values()
    assert len(log_groups) == len(HANDLERS) + 1
    for group in log_groups:
        assert render(group["Properties"]["KmsKeyId"]) in (f"<{key_id}.Arn>", "<KeyArn>")


def dashboard_expressions(synth: Synth) -> list[str]:
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    found = []
    for widget in body["widgets"]:
        for metric in widget["properties"].get("metrics", []):
            found += [m["expression"] for m in metric if isinstance(m, dict) and "expression" in m]
    return found


def test_dashboard_shows_every_metric_of_every_queue(default: Synth) -> None:
    expressions = dashboard_expressions(default)
    for name in (*metric_names.COORDINATOR_METRICS, *metric_names.WORKER_METRICS):
        assert any(
            f'{{S3Queue,queue,service}} MetricName="{name}" service="s3queue"' in e
            for e in expressions
        ), name
    for name in ("Errors", "Throttles", "AsyncEventsDropped", "AsyncEventAge"):
        assert any(
            f'{{AWS/Lambda,FunctionName}} MetricName="{name}" FunctionName=S3Queue' in e
            for e in expressions
        ), name
    (dashboard,) = default.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(render(dashboard["Properties"]["DashboardBody"]))
    for queue in HANDLERS:
        assert f"alarm:S3Queue-{queue}-dead-letters" in body
    assert "alarm:S3Queue-coordinator-silent" in body


def test_outputs_name_what_a_user_needs(default: Synth, variant: Synth) -> None:
    outputs = default.template.to_json()["Outputs"]
    assert {
        "BucketName",
        "BucketArn",
        "Prefix",
        "AlarmTopicArn",
        "DashboardName",
        "CoordinatorFunctionName",
        "WorkerFunctionNames",
    } <= set(outputs)
    assert "KeyArn" not in outputs
    assert "KeyArn" in variant.template.to_json()["Outputs"]

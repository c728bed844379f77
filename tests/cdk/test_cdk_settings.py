"""Context values: cdk.json names every setting with its default; CLI strings are coerced."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest
from aws_cdk import App
from cdk_support import CDK_CONTEXT
from s3queue.errors import ConfigError
from s3queue_cdk.alarms import silence_window
from s3queue_cdk.settings import DeploymentSettings, context_key

pytestmark = pytest.mark.cdk


def settings_from(context: dict[str, object]) -> DeploymentSettings:
    return DeploymentSettings.from_context(App(context=context).node)


def test_cdk_json_sets_every_setting_to_its_default() -> None:
    ours = {k: v for k, v in CDK_CONTEXT.items() if k.startswith("s3queue:")}
    assert ours == {context_key(f.name): f.default for f in fields(DeploymentSettings)}


def test_context_keys_are_camel_case_under_the_s3queue_namespace() -> None:
    assert context_key("ids_retention_days") == "s3queue:idsRetentionDays"
    assert context_key("kms") == "s3queue:kms"


def test_cli_strings_are_coerced() -> None:
    settings = settings_from(
        {"s3queue:lowLatency": "true", "s3queue:kms": "False", "s3queue:dlqRetentionDays": "30"}
    )
    assert (settings.low_latency, settings.kms, settings.dlq_retention_days) == (True, False, 30)


def test_missing_context_keeps_the_defaults() -> None:
    assert asdict(settings_from({})) == asdict(DeploymentSettings())


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("s3queue:lowLatency", "yes", "lowLatency='yes': expected bool"),
        ("s3queue:idsRetentionDays", "7d", "idsRetentionDays='7d': expected int"),
        ("s3queue:idsRetentionDays", 0, "idsRetentionDays must be at least 1"),
        ("s3queue:idempotencyRetentionDays", "0", "idempotencyRetentionDays must be at least 1"),
        ("s3queue:schedule", "rate(1 minutes)", "rate"),
        ("s3queue:schedule", "rate(5 minute)", "rate"),
        ("s3queue:schedule", "rate(0 minutes)", "rate"),
        ("s3queue:schedule", "cron(0 12 * *)", "cron"),
        ("s3queue:stackName", "S" * 41, "stackName"),
        ("s3queue:powertoolsLayerArn", "arn:aws:lambda:x", "powertoolsLayerArn"),
        ("s3queue:prefix", "/s3queue/", "prefix='/s3queue/'"),
        ("s3queue:schedule", "every minute", "rate"),
        ("s3queue:bucketNamePrefix", "Acme_Queues", "bucketNamePrefix"),
        ("s3queue:alarmEmail", "ops", "alarmEmail"),
        ("s3queue:coordinatorMemory", 64, "coordinatorMemory must be 128 to 10240"),
        ("s3queue:coordinatorMemory", "1 GB", "coordinatorMemory='1 GB': expected int"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        settings_from({key: value})


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(2 hours)", 7200),
        ("rate(1 day)", 86400),
        ("cron(0/5 * * * ? *)", None),
    ],
)
def test_schedules_accepted_and_their_interval(schedule: str, seconds: int | None) -> None:
    assert settings_from({"s3queue:schedule": schedule}).schedule_seconds == seconds


def test_the_coordinator_silence_window_covers_three_runs() -> None:
    assert silence_window(60).to_seconds() == 300
    assert silence_window(600).to_seconds() == 1800
    assert silence_window(86400).to_seconds() == 86400
    assert silence_window(None).to_seconds() == 86400

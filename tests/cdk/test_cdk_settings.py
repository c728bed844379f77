"""Context values: cdk.json names every setting with its default; CLI strings are coerced."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest
from aws_cdk import App
from cdk_support import CDK_CONTEXT
from s3queue.config import ConfigError
from s3queue_cdk.settings import DeploymentSettings, context_key

pytestmark = pytest.mark.cdk


def settings_from(context: dict[str, object]) -> DeploymentSettings:
    return DeploymentSettings.from_context(App(context=context).node)


def test_cdk_json_sets_every_setting_to_its_default() -> None:
    ours = {k: v for k, v in CDK_CONTEXT.items() if k.startswith("s3queue:")}
    assert ours == {context_key(f.name): f.default for f in fields(DeploymentSettings)}


def test_context_keys_are_camel_case_under_the_s3queue_namespace() -> None:
    assert context_key("done_retention_days") == "s3queue:doneRetentionDays"
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
        ("s3queue:doneRetentionDays", "7d", "doneRetentionDays='7d': expected int"),
        ("s3queue:doneRetentionDays", 0, "doneRetentionDays must be at least 1"),
        ("s3queue:prefix", "/s3queue/", "prefix='/s3queue/'"),
        ("s3queue:schedule", "every minute", "rate"),
        ("s3queue:bucketNamePrefix", "Acme_Queues", "bucketNamePrefix"),
        ("s3queue:alarmEmail", "ops", "alarmEmail"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        settings_from({key: value})

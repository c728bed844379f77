"""A stack of `MAX_QUEUES` queues synthesizes and fits every AWS limit; one more fails loudly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack, assertions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from cdk_support import CDK_CONTEXT, Synth, render, synth
from s3queue.errors import ConfigError
from s3queue_cdk.app import build
from s3queue_cdk.functions import QueueFunction, environment_size
from s3queue_cdk.permissions import grant_enqueue
from s3queue_cdk.stack import FUNCTIONS_DIR, MAX_QUEUES

pytestmark = pytest.mark.cdk

RESOURCES_MAX = 500
OUTPUTS_MAX = 200
PARAMETERS_MAX = 200
ENVIRONMENT_MAX = 4096
LIFECYCLE_RULES_MAX = 1000
ROLE_POLICY_MAX = 10_240
TOKEN_MAX = 63


def handlers_dir(tmp: Path, count: int) -> Path:
    """`count` handler modules with long names and settings that differ between them."""
    target = tmp / "functions"
    shutil.copytree(FUNCTIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    for module in (target / "handlers").glob("*.py"):
        module.unlink()
    for i in range(count):
        settings = {"visibility_timeout": 30 + i % 5, "max_retries": i % 4, "concurrency": 2}
        (target / "handlers" / f"customer_invoice_reminder_{i:03d}.py").write_text(
            f"SETTINGS = {settings!r}\n\ndef handle(message):\n    return None\n"
        )
    return target


@pytest.fixture(scope="module")
def largest(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth(functions_dir=handlers_dir(tmp_path_factory.mktemp("scale"), MAX_QUEUES))


def env_size(variables: dict[str, Any]) -> int:
    """The bytes Lambda counts; every reference counted as the longest name it can become."""
    size = 0
    for name, value in variables.items():
        text = json.dumps(render(value)) if not isinstance(value, str) else value
        size += len(name) + len(text) + text.count("<") * TOKEN_MAX
    return size


def test_every_template_fits_cloudformations_limits(largest: Synth) -> None:
    templates = largest.templates
    assert len(templates) >= 2, "the queues live in nested stacks"
    for template in templates:
        assert len(template["Resources"]) <= RESOURCES_MAX
        assert len(template.get("Outputs", {})) <= OUTPUTS_MAX
        assert len(template.get("Parameters", {})) <= PARAMETERS_MAX
    assert len(largest.workers()) == MAX_QUEUES


def test_every_function_environment_fits_in_4_kb(largest: Synth) -> None:
    functions = largest.of_type("AWS::Lambda::Function").values()
    assert len(functions) == MAX_QUEUES + 1
    for function in functions:
        assert env_size(function["Properties"]["Environment"]["Variables"]) <= ENVIRONMENT_MAX


def test_lifecycle_rules_and_role_policies_fit(largest: Synth) -> None:
    bucket = largest.resources[largest.logical_id(largest.stack.storage.bucket)]
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert 2 * MAX_QUEUES + 2 <= len(rules) <= LIFECYCLE_RULES_MAX
    policies = largest.of_type("AWS::IAM::Policy").values()
    assert len(policies) >= MAX_QUEUES + 1
    for policy in policies:
        text = json.dumps(render(policy["Properties"]["PolicyDocument"]), separators=(",", ":"))
        assert len(text) + text.count("<") * TOKEN_MAX <= ROLE_POLICY_MAX


def test_one_queue_over_the_ceiling_fails_the_synth_saying_so(tmp_path: Path) -> None:
    functions = handlers_dir(tmp_path, MAX_QUEUES + 1)
    with pytest.raises(ConfigError, match=f"at most {MAX_QUEUES} queues"):
        build(App(context=CDK_CONTEXT), functions_dir=functions)


def test_grant_enqueue_to_another_account_writes_bucket_and_key_policies() -> None:
    app = App(
        context={**CDK_CONTEXT, "s3queue:kms": True}, builtin_cloud_formation_validation=False
    )
    stack = build(app)
    partner = iam.AccountPrincipal("111122223333")
    imported = iam.Role.from_role_arn(stack, "Imported", "arn:aws:iam::444455556666:role/orders")
    stack.grant_enqueue(partner, "send_email")
    stack.grant_enqueue(imported, "generate_report")
    template = assertions.Template.from_stack(stack).to_json()
    bucket_id = stack.get_logical_id(stack.storage.bucket.node.default_child)  # type: ignore[arg-type]
    (policy,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    allows = [render(s) for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    by_resource = {s["Resource"]: s for s in allows if s["Action"] == "s3:PutObject"}
    bucket = f"<{bucket_id}.Arn>"
    email = by_resource[f"{bucket}/s3queue/send_email/inbox/*"]
    assert "111122223333" in json.dumps(email["Principal"])
    report = by_resource[f"{bucket}/s3queue/generate_report/inbox/*"]
    assert report["Principal"] == {"AWS": "arn:aws:iam::444455556666:role/orders"}
    # Nothing attached in this account for the imported role: it could not apply there.
    policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    assert not [p for p in policies if "orders" in json.dumps(p)]
    key_id = stack.get_logical_id(stack.storage.key.node.default_child)  # type: ignore[union-attr,arg-type]
    key_policy = render(template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"])
    partners = [s for s in key_policy if "444455556666" in json.dumps(s.get("Principal"))]
    (key_grant,) = partners
    assert key_grant["Condition"] == {
        "StringEquals": {"kms:ViaService": "s3.<AWS::Region>.amazonaws.com"}
    }


def test_grant_enqueue_fails_loudly_when_no_policy_can_be_written() -> None:
    # GIVEN a bucket imported from elsewhere: its policy is not this app's to write
    stack = Stack(App(), "Elsewhere")
    bucket = s3.Bucket.from_bucket_name(stack, "Imported", "someone-elses-bucket")
    partner = iam.AccountPrincipal("111122223333")
    with pytest.raises(ConfigError, match="bucket's policy cannot be written"):
        grant_enqueue(partner, bucket=bucket, prefix="s3queue", queue="send_email", key=None)


def test_an_environment_over_4_kb_fails_the_synth_naming_the_function() -> None:
    stack = Stack(App(), "Big")
    assert environment_size({"A": "x" * 10}) == 11
    assert environment_size({"B": stack.region}) == 1 + len(stack.region) + 63
    with pytest.raises(ConfigError, match=r"big function: .* over Lambda's 4096"):
        QueueFunction(
            stack,
            "Big",
            code=lambda_.Code.from_inline("def handler(e, c): pass"),
            handler="index.handler",
            description="big function",
            layers=[],
            environment={"S3QUEUE_QUEUES": "x" * 4096},
            timeout=Duration.seconds(10),
            memory=128,
            reserved_concurrency=None,
            max_event_age=Duration.minutes(1),
            removal_policy=RemovalPolicy.DESTROY,
        )

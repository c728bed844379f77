"""cdk-nag's AwsSolutions pack: zero unacknowledged findings, each acknowledgement reasoned."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk import App, assertions
from aws_cdk import aws_s3 as s3
from cdk_support import CDK_CONTEXT, Synth
from s3queue_cdk.app import build

pytestmark = pytest.mark.cdk
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
# The only findings the stack may acknowledge: runtime pin, X-Ray's Resource '*', object
# wildcards under one queue's prefix or its idempotency records' (or the stack's, for the
# coordinator), and the coordinator's invoke of the stack's `<stack>_*` workers.
ALLOWED = re.compile(
    r"^AwsSolutions::AwsSolutions-(L1"
    r"|IAM5\[Resource::\*\]"
    r"|IAM5\[Resource::(<StorageBucket[0-9A-F]{8}\.Arn>|<BucketArn>)/[\w/.-]+/"
    r"((_idempotency/)?[a-z0-9][a-z0-9_-]*/(inbox/)?)?\*\]"
    r"|IAM5\[Resource::arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:function:"
    r"[A-Za-z][A-Za-z0-9-]*_\*\])$"
)


def acknowledgements(synth: Synth) -> dict[str, dict[str, str]]:
    """Acknowledged finding -> reason, by construct path."""
    found: dict[str, dict[str, str]] = {}
    for construct in synth.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == ACKNOWLEDGED:
                found.setdefault(construct.node.path, {}).update(entry.data)
    return found


@pytest.mark.parametrize("name", ["default", "variant"])
def test_every_acknowledgement_is_narrow_and_reasoned(name: str, request: Any) -> None:
    # GIVEN a stack that synthesized, so cdk-nag found nothing unacknowledged
    found = acknowledgements(request.getfixturevalue(name))
    assert found
    for path, rules in found.items():
        for rule, reason in rules.items():
            assert ALLOWED.match(rule), (path, rule)
            assert len(reason.split()) >= 8, (path, rule, reason)


def test_prefix_wildcards_are_acknowledged_once_per_granted_prefix(default: Synth) -> None:
    found = acknowledgements(default)
    role = default.stack.coordinator.runtime.role.node.path
    assert [rule for rule in found[role] if "/s3queue/" in rule] == [
        f"AwsSolutions::AwsSolutions-IAM5[Resource::<{default.logical_id(default.stack.storage.bucket)}.Arn>/s3queue/*]"
    ]
    for queue, worker in default.stack.workers.items():
        rules = [rule for rule in found[worker.runtime.role.node.path] if "/s3queue/" in rule]
        assert sorted(rules) == [
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<BucketArn>/s3queue/_idempotency/{queue}/*]",
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<BucketArn>/s3queue/{queue}/*]",
        ]


def test_nag_fails_the_synth_on_an_unacknowledged_finding() -> None:
    # GIVEN the stack plus a bucket with neither access logs nor TLS enforcement
    stack = build(App(context=CDK_CONTEXT, builtin_cloud_formation_validation=False))
    s3.Bucket(stack, "Careless")
    # WHEN it is synthesized THEN cdk-nag stops the synth
    with pytest.raises(RuntimeError, match=r"ValidationFailed[\s\S]*AwsSolutions-S1\b"):
        assertions.Template.from_stack(stack)

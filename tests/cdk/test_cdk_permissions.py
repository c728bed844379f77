"""IAM is least privilege: every S3 permission is scoped to queue prefixes, no wildcards."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_support import Synth, render
from s3queue.config import ConfigError
from s3queue.discovery import discover_handlers
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = pytest.mark.cdk
QUEUES = sorted(discover_handlers(FUNCTIONS_DIR / "handlers"))
OBJECT_ACTIONS = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]


def statements(synth: Synth, role: Any) -> list[dict[str, Any]]:
    """The rendered statements of the policies attached to `role`."""
    role_id = synth.logical_id(role)
    found = []
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return [render(statement) for statement in found]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def s3_statements(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in found if any(a.startswith("s3:") for a in as_list(s["Action"]))]


@pytest.mark.parametrize("name", ["default", "variant"])
def test_no_s3_wildcard_action_or_resource_anywhere(name: str, request: Any) -> None:
    synth: Synth = request.getfixturevalue(name)
    statements = [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    checked = s3_statements(statements)
    assert checked, "the stack grants S3 actions: there is something to check"
    for statement in checked:
        actions = as_list(statement["Action"])
        assert not [a for a in actions if a.startswith("s3:") and "*" in a], statement
        assert "*" not in as_list(statement["Resource"]), statement


def test_each_worker_reaches_only_its_own_queue_prefix(default: Synth) -> None:
    bucket = f"<{default.logical_id(default.stack.storage.bucket)}.Arn>"
    for queue, worker in default.stack.workers.by_queue.items():
        found = s3_statements(statements(default, worker.runtime.role))
        assert found == [
            {
                "Action": "s3:ListBucket",
                "Condition": {"StringLike": {"s3:prefix": [f"s3queue/{queue}/*"]}},
                "Effect": "Allow",
                "Resource": bucket,
            },
            {
                "Action": OBJECT_ACTIONS,
                "Effect": "Allow",
                "Resource": f"{bucket}/s3queue/{queue}/*",
            },
        ]


def test_coordinator_reaches_every_queue_prefix_and_invokes_exactly_the_workers(
    default: Synth,
) -> None:
    bucket = f"<{default.logical_id(default.stack.storage.bucket)}.Arn>"
    found = statements(default, default.stack.coordinator.runtime.role)
    (listing,) = [s for s in found if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": [f"s3queue/{queue}/*" for queue in QUEUES]}
    }
    (objects,) = [s for s in found if s["Action"] == OBJECT_ACTIONS]
    assert sorted(as_list(objects["Resource"])) == [f"{bucket}/s3queue/{q}/*" for q in QUEUES]
    (invoke,) = [s for s in found if "lambda:InvokeFunction" in as_list(s["Action"])]
    workers = default.stack.workers.by_queue
    assert sorted(as_list(invoke["Resource"])) == sorted(
        f"<{default.logical_id(workers[q].function)}.Arn>" for q in QUEUES
    )


def test_functions_get_nothing_else(default: Synth) -> None:
    for role in [default.stack.coordinator.runtime.role] + [
        w.runtime.role for w in default.stack.workers.by_queue.values()
    ]:
        actions = {a for s in statements(default, role) for a in as_list(s["Action"])}
        assert actions <= {
            "logs:CreateLogStream",
            "logs:PutLogEvents",
            "xray:PutTraceSegments",
            "xray:PutTelemetryRecords",
            "s3:ListBucket",
            *OBJECT_ACTIONS,
            "lambda:InvokeFunction",
        }
    roles = default.of_type("AWS::IAM::Role").values()
    assert not [r for r in roles if r["Properties"].get("ManagedPolicyArns")]


def test_grant_enqueue_allows_put_into_the_inbox_only(variant: Synth) -> None:
    producer = variant.stack.node.find_child("Producer")
    bucket = f"<{variant.logical_id(variant.stack.storage.bucket)}.Arn>"
    assert variant.stack.storage.key is not None
    key = f"<{variant.logical_id(variant.stack.storage.key)}.Arn>"
    assert statements(variant, producer) == [
        {
            "Action": "s3:PutObject",
            "Effect": "Allow",
            "Resource": f"{bucket}/jobs/prod/send_email/inbox/*",
        },
        {"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow", "Resource": key},
    ]


def test_grant_enqueue_rejects_an_unknown_queue(default: Synth) -> None:
    with pytest.raises(ConfigError, match="unknown queue 'nope'"):
        default.stack.grant_enqueue(default.stack.coordinator.runtime.role, "nope")


def test_with_kms_functions_may_use_the_key_and_only_it(variant: Synth) -> None:
    assert variant.stack.storage.key is not None
    key = f"<{variant.logical_id(variant.stack.storage.key)}.Arn>"
    for worker in variant.stack.workers.by_queue.values():
        found = statements(variant, worker.runtime.role)
        (kms,) = [s for s in found if str(s["Action"]).startswith("['kms:")]
        assert kms == {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Effect": "Allow",
            "Resource": key,
        }

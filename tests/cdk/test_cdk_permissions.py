"""IAM is least privilege: every S3 permission is scoped to queue prefixes, no wildcards."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_support import Synth, render
from rehearsal import allowed
from s3queue.contract.discovery import discover_handlers
from s3queue.contract.environment import Environment
from s3queue.errors import ConfigError
from s3queue.idempotency import records_root
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
    assert default.stack.workers
    for queue, worker in default.stack.workers.items():
        found = s3_statements(statements(default, worker.runtime.role))
        patterns = [f"s3queue/{queue}/*", f"s3queue/_idempotency/{queue}/*"]
        assert found == [
            {
                "Action": "s3:ListBucket",
                "Condition": {"StringLike": {"s3:prefix": patterns}},
                "Effect": "Allow",
                "Resource": "<BucketArn>",
            },
            {
                "Action": OBJECT_ACTIONS,
                "Effect": "Allow",
                "Resource": sorted(f"<BucketArn>/{pattern}" for pattern in patterns),
            },
        ]


@pytest.mark.parametrize("name", ["default", "variant"])
def test_each_worker_reaches_its_own_idempotency_records_only(name: str, request: Any) -> None:
    synth: Synth = request.getfixturevalue(name)
    assert len(synth.stack.workers) >= 2
    for queue, worker in synth.stack.workers.items():
        # GIVEN the records prefix `S3PersistenceLayer.from_env()` builds from the worker's env
        env = {
            k: str(render(v)) for k, v in synth.workers()[queue]["Environment"]["Variables"].items()
        }
        config = Environment.from_env(env)
        mine = records_root(config.prefix, config.queue)
        found = statements(synth, worker.runtime.role)
        # THEN its policy allows every request the layer makes there, a missing record's 404
        # (ListBucket) included
        record = f"<BucketArn>/{mine}fn.handlers.{queue}.send/0a1b"
        for action in OBJECT_ACTIONS:
            assert allowed(found, action, record, {}), (queue, action)
        assert allowed(found, "s3:ListBucket", "<BucketArn>", {"s3:prefix": mine})
        # AND nothing of another queue's records, nor the records root itself
        for other in set(synth.stack.workers) - {queue}:
            theirs = records_root(config.prefix, other)
            for action in OBJECT_ACTIONS:
                assert not allowed(found, action, f"<BucketArn>/{theirs}fn/0a1b", {}), other
            assert not allowed(found, "s3:ListBucket", "<BucketArn>", {"s3:prefix": theirs})
        root = records_root(config.prefix)
        assert not allowed(found, "s3:GetObject", f"<BucketArn>/{root}fn/0a1b", {})
        assert not allowed(found, "s3:ListBucket", "<BucketArn>", {"s3:prefix": root})


def test_coordinator_reaches_the_stack_prefix_and_invokes_only_the_stack_workers(
    default: Synth,
) -> None:
    bucket = f"<{default.logical_id(default.stack.storage.bucket)}.Arn>"
    found = statements(default, default.stack.coordinator.runtime.role)
    (listing,) = [s for s in found if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["s3queue/*"]}}
    (objects,) = [s for s in found if s["Action"] == OBJECT_ACTIONS]
    assert objects["Resource"] == f"{bucket}/s3queue/*"
    (invoke,) = [s for s in found if "lambda:InvokeFunction" in as_list(s["Action"])]
    assert invoke["Resource"] == (
        "arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:function:S3Queue_*"
    )
    workers = {p["FunctionName"] for p in default.workers().values()}
    assert workers == {f"S3Queue_{q}" for q in QUEUES}


def test_functions_get_nothing_else(default: Synth) -> None:
    roles = [default.stack.coordinator.runtime.role]
    roles += [w.runtime.role for w in default.stack.workers.values()]
    assert len(roles) == len(QUEUES) + 1
    for role in roles:
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
        assert "s3:ListBucket" in actions
    iam_roles = default.of_type("AWS::IAM::Role").values()
    assert len(iam_roles) >= len(roles)
    assert not [r for r in iam_roles if r["Properties"].get("ManagedPolicyArns")]


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
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Condition": {"StringEquals": {"kms:ViaService": "s3.<AWS::Region>.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": key,
        },
    ]


def test_each_queue_has_a_managed_enqueue_policy_and_an_output(default: Synth) -> None:
    policies = {
        p["Properties"]["ManagedPolicyName"]: render(p["Properties"]["PolicyDocument"])
        for p in default.of_type("AWS::IAM::ManagedPolicy").values()
    }
    assert sorted(policies) == [f"S3Queue-{q}-enqueue" for q in QUEUES]
    for queue in QUEUES:
        (statement,) = policies[f"S3Queue-{queue}-enqueue"]["Statement"]
        assert statement["Action"] == "s3:PutObject"
        assert statement["Resource"] == f"<BucketArn>/s3queue/{queue}/inbox/*"
    outputs = [render(o["Value"]) for o in default.template.to_json()["Outputs"].values()]
    for queue in QUEUES:
        arn = f"arn:<AWS::Partition>:iam::<AWS::AccountId>:policy/S3Queue-{queue}-enqueue"
        assert render(arn) in outputs


def test_grant_enqueue_rejects_an_unknown_queue(default: Synth) -> None:
    with pytest.raises(ConfigError, match="unknown queue 'nope'"):
        default.stack.grant_enqueue(default.stack.coordinator.runtime.role, "nope")


def test_with_kms_functions_may_use_the_key_through_s3_only(variant: Synth) -> None:
    assert variant.stack.workers
    for worker in variant.stack.workers.values():
        found = statements(variant, worker.runtime.role)
        (kms,) = [s for s in found if str(s["Action"]).startswith("['kms:")]
        assert kms == {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Condition": {"StringEquals": {"kms:ViaService": "s3.<AWS::Region>.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": "<KeyArn>",
        }

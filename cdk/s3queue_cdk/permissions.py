"""Least-privilege grants: every S3 permission is scoped to one or more queue prefixes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.keys import QueueKeys

from s3queue_cdk.acknowledgements import acknowledge, arn_reference

QUEUE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
"""GetObject also covers HEAD; DeleteObject also covers the keys of a DeleteObjects batch."""
KEY_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]


def grant_queue_access(
    grantee: iam.IGrantable,
    *,
    bucket: s3.IBucket,
    prefix: str,
    queues: Sequence[str],
    key: kms.IKey | None,
) -> None:
    """List, read, write and delete under ``<prefix>/<queue>/`` of each queue, nothing else."""
    roots = [QueueKeys(prefix, queue).root for queue in queues]
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["s3:ListBucket"],
        resource_arns=[bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": [root + "*" for root in roots]}},
    )
    object_arns = [bucket.arn_for_objects(root + "*") for root in roots]
    iam.Grant.add_to_principal(
        grantee=grantee, actions=QUEUE_OBJECT_ACTIONS, resource_arns=object_arns
    )
    if key is not None:
        _grant_key(grantee, key, KEY_ACTIONS)
    _acknowledge_prefixes(grantee, bucket, [root + "*" for root in roots])


def grant_enqueue(
    grantee: iam.IGrantable,
    *,
    bucket: s3.IBucket,
    prefix: str,
    queue: str,
    key: kms.IKey | None,
) -> iam.Grant:
    """PutObject under ``<prefix>/<queue>/inbox/`` only: how another service enqueues."""
    pattern = QueueKeys(prefix, queue).inbox + "*"
    grant = iam.Grant.add_to_principal(
        grantee=grantee, actions=["s3:PutObject"], resource_arns=[bucket.arn_for_objects(pattern)]
    )
    if key is not None:
        # Decrypt too: a multipart upload reads back its encrypted parts.
        _grant_key(grantee, key, KEY_ACTIONS)
    _acknowledge_prefixes(grantee, bucket, [pattern])
    return grant


def grant_invoke(grantee: iam.IGrantable, functions: Iterable[lambda_.IFunction]) -> iam.Grant:
    """lambda:InvokeFunction on exactly these functions: no version or alias wildcard."""
    return iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["lambda:InvokeFunction"],
        resource_arns=[function.function_arn for function in functions],
    )


def _grant_key(grantee: iam.IGrantable, key: kms.IKey, actions: list[str]) -> None:
    iam.Grant.add_to_principal(grantee=grantee, actions=actions, resource_arns=[key.key_arn])


def _acknowledge_prefixes(grantee: iam.IGrantable, bucket: s3.IBucket, patterns: list[str]) -> None:
    """Acknowledge the prefix wildcards just granted, on the principal that holds them."""
    principal = grantee.grant_principal
    if not isinstance(principal, Construct):
        return
    bucket_arn = arn_reference(bucket, bucket.bucket_arn)
    for pattern in patterns:
        acknowledge(
            principal,
            f"IAM5[Resource::{bucket_arn}/{pattern}]",
            "Objects are named freely under a queue's prefix (message ids, ticket numbers, "
            "other services' inbox names): the wildcard covers that one prefix only.",
        )

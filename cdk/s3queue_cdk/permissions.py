"""Least-privilege grants: every S3 permission is scoped to one queue's prefixes or the stack's.

Under KMS every key permission holds only through S3 (``kms:ViaService``): a role that may
read a queue cannot decrypt anything else with the stack's key.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct
from s3queue.contract import names
from s3queue.errors import ConfigError

from s3queue_cdk.acknowledgements import acknowledge, arn_reference

QUEUE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
"""GetObject also covers HEAD; DeleteObject also covers the keys of a DeleteObjects batch."""
ENQUEUE_ACTIONS = ["s3:PutObject"]
KEY_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]
"""Decrypt too for producers: a multipart upload reads back its encrypted parts."""


def grant_queue_access(
    grantee: iam.IGrantable, *, bucket: s3.IBucket, prefix: str, queue: str, key: kms.IKey | None
) -> None:
    """List, read, write and delete under ``<prefix>/<queue>/`` and the queue's idempotency
    records ``<prefix>/_idempotency/<queue>/``, nothing else: one worker."""
    queue_objects = names.queue_root(prefix, queue) + "*"
    records = names.idempotency_root(prefix, queue) + "*"
    _grant_prefixes(grantee, bucket, [queue_objects, records], key)
    _acknowledge_prefixes(grantee, bucket, [queue_objects])
    principal = grantee.grant_principal
    if isinstance(principal, Construct):
        acknowledge(
            principal,
            f"IAM5[Resource::{arn_reference(bucket, bucket.bucket_arn)}/{records}]",
            "Idempotency records are named by function and payload hash, unknown at deploy "
            "time: the wildcard covers this one queue's records prefix only.",
        )


def grant_stack_access(
    grantee: iam.IGrantable, *, bucket: s3.IBucket, prefix: str, key: kms.IKey | None
) -> None:
    """The same rights on every queue under ``<prefix>/`` (idempotency records included): the
    coordinator serves them all.

    One prefix, not one per queue: a hundred queue prefixes would overflow the role's 10 KB
    policy size, and the stack's prefix holds only its queues.
    """
    _grant_prefixes(grantee, bucket, [prefix + "/*"], key)
    _acknowledge_prefixes(grantee, bucket, [prefix + "/*"])


def grant_invoke_workers(grantee: iam.IGrantable, stack_name: str) -> iam.Grant:
    """lambda:InvokeFunction on the stack's workers: the functions named ``<stack>_*``."""
    pattern = (
        f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{Aws.ACCOUNT_ID}:function:"
        f"{names.worker_function_prefix(stack_name)}*"
    )
    grant = iam.Grant.add_to_principal(
        grantee=grantee, actions=["lambda:InvokeFunction"], resource_arns=[pattern]
    )
    principal = grantee.grant_principal
    if isinstance(principal, Construct):
        acknowledge(
            principal,
            f"IAM5[Resource::arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:"
            f"function:{names.worker_function_prefix(stack_name)}*]",
            "The workers are named <stack>_<queue>, and stack names have no underscore: the "
            "pattern matches exactly this stack's workers, without a policy entry per queue.",
        )
    return grant


def inbox_pattern(prefix: str, queue: str) -> str:
    """The objects a producer of `queue` may put: ``<prefix>/<queue>/inbox/*``."""
    return names.queue_root(prefix, queue) + names.INBOX + "*"


def enqueue_statements(
    bucket: s3.IBucket, prefix: str, queue: str, key: kms.IKey | None
) -> list[iam.PolicyStatement]:
    """PutObject into the queue's inbox (and the key, through S3 only): a producer's rights."""
    inbox = bucket.arn_for_objects(inbox_pattern(prefix, queue))
    found = [iam.PolicyStatement(actions=ENQUEUE_ACTIONS, resources=[inbox])]
    if key is not None:
        found.append(
            iam.PolicyStatement(actions=KEY_ACTIONS, resources=[key.key_arn], conditions=_via_s3())
        )
    return found


def grant_enqueue(
    grantee: iam.IGrantable, *, bucket: s3.IBucket, prefix: str, queue: str, key: kms.IKey | None
) -> None:
    """Let `grantee` enqueue to `queue` by plain PUT, from this account or any other.

    A principal of this stack's account gets an identity policy. Any other (an
    ``AccountPrincipal``, a role imported from another account, a principal whose account is
    not known until deployment) gets a statement in the bucket policy and, under KMS, in the
    key policy; its own account must still allow it the same actions (see deployment.md).
    Raises `ConfigError` when no statement can be written.
    """
    principal = grantee.grant_principal
    if _same_account(principal, bucket) and _attach(principal, bucket, prefix, queue, key):
        _acknowledge_prefixes(grantee, bucket, [inbox_pattern(prefix, queue)])
        return
    inbox = bucket.arn_for_objects(inbox_pattern(prefix, queue))
    statement = iam.PolicyStatement(
        principals=[principal], actions=ENQUEUE_ACTIONS, resources=[inbox]
    )
    if not bucket.add_to_resource_policy(statement).statement_added:
        raise ConfigError(f"grant_enqueue({queue!r}): the bucket's policy cannot be written")
    if key is not None:
        key_statement = iam.PolicyStatement(
            principals=[principal], actions=KEY_ACTIONS, resources=["*"], conditions=_via_s3()
        )
        if not key.add_to_resource_policy(key_statement).statement_added:
            raise ConfigError(f"grant_enqueue({queue!r}): the key's policy cannot be written")


def _attach(
    principal: iam.IPrincipal, bucket: s3.IBucket, prefix: str, queue: str, key: kms.IKey | None
) -> bool:
    """Add the enqueue statements to `principal`'s own policy; False if it has none."""
    statements = enqueue_statements(bucket, prefix, queue, key)
    return all(principal.add_to_principal_policy(s).statement_added for s in statements)


def _same_account(principal: iam.IPrincipal, bucket: s3.IBucket) -> bool:
    """Whether `principal` is of the bucket's account, as far as synth can tell.

    Both unresolved (a role of this stack, ``AccountRootPrincipal``) counts as the same; one
    concrete and one a token, or two different accounts, does not.
    """
    account = principal.principal_account
    if account is None:
        return False
    own = Stack.of(bucket).account
    return account == own or (Token.is_unresolved(account) and Token.is_unresolved(own))


def _via_s3() -> dict[str, Any]:
    return {"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}}


def _grant_prefixes(
    grantee: iam.IGrantable, bucket: s3.IBucket, patterns: list[str], key: kms.IKey | None
) -> None:
    """List, read, write and delete the objects matching `patterns` (``<root>*`` each).

    ListBucket too, on the same prefixes: without it S3 answers 403, not 404, for a missing
    key. One statement per kind, however many prefixes, to keep the role's policy small.
    """
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["s3:ListBucket"],
        resource_arns=[bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": patterns}},
    )
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=QUEUE_OBJECT_ACTIONS,
        resource_arns=[bucket.arn_for_objects(pattern) for pattern in patterns],
    )
    if key is not None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=KEY_ACTIONS, resources=[key.key_arn], conditions=_via_s3())
        )


def _acknowledge_prefixes(grantee: iam.IGrantable, bucket: s3.IBucket, patterns: list[str]) -> None:
    """Acknowledge the prefix wildcards just granted, on the principal that holds them."""
    principal = grantee.grant_principal
    if isinstance(principal, Construct):
        for pattern in patterns:
            acknowledge_prefix(principal, bucket, pattern)


def acknowledge_prefix(holder: Construct, bucket: s3.IBucket, pattern: str) -> None:
    """Acknowledge one queue prefix wildcard on the role or policy that holds it."""
    bucket_arn = arn_reference(bucket, bucket.bucket_arn)
    acknowledge(
        holder,
        f"IAM5[Resource::{bucket_arn}/{pattern}]",
        "Objects are named freely under a queue's prefix (message ids, ticket numbers, "
        "other services' inbox names): the wildcard covers that one prefix only.",
    )

"""`QueueGroup`: a nested stack holding some queues' own resources.

Each queue needs its worker (function, role, policy, log group, invoke config), an enqueue
policy and three alarms: nine resources. A CloudFormation stack holds 500, so the queues are
spread over `GROUPS` nested stacks by a hash of their name (a queue never moves to
another group as queues come and go: its named resources would clash); the parent keeps what
is shared (bucket, layers, coordinator, topic, dashboard). Nothing in the parent refers into a
group: workers, alarms and policies have names made from the stack's and the queue's, so the
coordinator and the dashboard address them by name, and a group reads the parent's bucket,
key, layer and topic as its parameters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import CfnParameter, Duration, NestedStack, RemovalPolicy
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct
from s3queue.contract import names
from s3queue.contract.discovery import HandlerSpec

from s3queue_cdk import alarms, permissions
from s3queue_cdk.workers import Worker, deployed_settings, worker_code

GROUPS = 8
"""150 queues (the stack's ceiling) spread over 8 groups: about 19 a group, 170 resources."""


def enqueue_policy_name(stack_name: str, queue: str) -> str:
    return f"{stack_name}-{queue}-enqueue"


class QueueGroup(NestedStack):
    """Workers, their grants, enqueue policies and alarms of some queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        specs: Sequence[HandlerSpec],
        entry_dir: Path,
        handlers_dir: Path,
        layer: lambda_.ILayerVersion,
        powertools_arn: str,
        bucket: s3.IBucket,
        prefix: str,
        key: kms.IKey | None,
        topic: sns.ITopic,
        oldest_message_alarm: Duration,
        reserve_concurrency: bool,
        removal_policy: RemovalPolicy,
    ) -> None:
        shared = {
            "BucketName": bucket.bucket_name,
            "BucketArn": bucket.bucket_arn,
            "LayerArn": layer.layer_version_arn,
            "TopicArn": topic.topic_arn,
            **({"KeyArn": key.key_arn} if key is not None else {}),
        }
        super().__init__(
            scope,
            construct_id,
            description=f"S3Queue queues of {stack_name}",
            parameters=shared,
        )
        value = {name: CfnParameter(self, name, type="String").value_as_string for name in shared}
        key = kms.Key.from_key_arn(self, "Key", value["KeyArn"]) if key is not None else None
        bucket = s3.Bucket.from_bucket_attributes(
            self, "Bucket", bucket_name=value["BucketName"], bucket_arn=value["BucketArn"]
        )
        topic = sns.Topic.from_topic_arn(self, "Topic", value["TopicArn"])
        layers = [
            lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", powertools_arn),
            lambda_.LayerVersion.from_layer_version_arn(self, "S3Queue", value["LayerArn"]),
        ]
        self.workers: dict[str, Worker] = {}
        self.enqueue_policies: dict[str, iam.ManagedPolicy] = {}
        action = cw_actions.SnsAction(topic)
        # One Code per nested stack (a Code binds to one stack); one asset for them all.
        code = worker_code(entry_dir, handlers_dir)
        for spec in specs:
            worker = Worker(
                self,
                spec.queue,
                spec=spec,
                function_name=names.worker_function_name(stack_name, spec.queue),
                settings=deployed_settings(spec.settings, reserve_concurrency),
                code=code,
                layers=layers,
                bucket=bucket,
                prefix=prefix,
                reserve_concurrency=reserve_concurrency,
                removal_policy=removal_policy,
                encryption_key=key,
            )
            permissions.grant_queue_access(
                worker.function, bucket=bucket, prefix=prefix, queue=spec.queue, key=key
            )
            self.workers[spec.queue] = worker
            self.enqueue_policies[spec.queue] = iam.ManagedPolicy(
                self,
                f"{spec.queue}-Enqueue",
                managed_policy_name=enqueue_policy_name(stack_name, spec.queue),
                description=f"Enqueue to S3Queue queue {spec.queue} by plain PUT into its inbox",
                statements=permissions.enqueue_statements(bucket, prefix, spec.queue, key),
            )
            permissions.acknowledge_prefix(
                self.enqueue_policies[spec.queue],
                bucket,
                permissions.inbox_pattern(prefix, spec.queue),
            )
            for alarm in alarms.queue_alarms(
                self,
                stack_name=stack_name,
                queue=spec.queue,
                worker=worker.function_name,
                oldest=oldest_message_alarm,
            ):
                alarm.add_alarm_action(action)
                alarm.add_ok_action(action)


def group_of(queue: str) -> int:
    """The group a queue lives in, for good: a hash of its name."""
    return int(hashlib.sha256(queue.encode()).hexdigest(), 16) % GROUPS


def groups_of(specs: Mapping[str, HandlerSpec]) -> dict[int, list[HandlerSpec]]:
    """The queues by group, the groups without a queue left out."""
    groups: dict[int, list[HandlerSpec]] = {}
    for queue in sorted(specs):
        groups.setdefault(group_of(queue), []).append(specs[queue])
    return dict(sorted(groups.items()))

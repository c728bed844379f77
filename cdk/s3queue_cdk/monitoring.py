"""`Monitoring`: the alarm topic, the coordinator's alarms and the stack's dashboard.

The queues' own alarms live with their workers (`s3queue_cdk.queues`), and notify this topic.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from s3queue_cdk import alarms
from s3queue_cdk.dashboard import QueueDashboard


def from_cloudwatch_alarms() -> dict[str, dict[str, str]]:
    """Only this account's alarms may use the grant (the confused-deputy conditions)."""
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnLike": {
            "aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"
        },
    }


class Monitoring(Construct):
    """The alarm topic (TLS only; CloudWatch may publish), coordinator alarms, the dashboard.

    The topic is encrypted with the stack's KMS key when there is one (its key policy then lets
    CloudWatch use it for this account's alarms). Without one it is not encrypted at rest:
    CloudWatch alarms cannot publish to a topic under the AWS-managed SNS key, and alarm
    messages carry only alarm and queue names, metric values and thresholds.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        alarm_email: str,
        encryption_key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.stack_name = stack_name
        self.topic = self._topic(alarm_email, encryption_key)
        self.alarms: list[cw.Alarm] = []

    def watch_coordinator(self, coordinator: str, schedule_seconds: int | None) -> None:
        """Alarm when the coordinator fails, or does not run for three schedule intervals."""
        window = alarms.silence_window(schedule_seconds)
        action = cw_actions.SnsAction(self.topic)
        for alarm in alarms.coordinator_alarms(
            self, stack_name=self.stack_name, coordinator=coordinator, window=window
        ):
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            self.alarms.append(alarm)

    def add_dashboard(
        self, workers: dict[str, str], coordinator: str, queue_alarms: Sequence[str]
    ) -> None:
        """The dashboard of `workers` (queue -> function name), with every alarm's state."""
        own = [alarms.alarm_name(self.stack_name, None, w) for w in alarms.COORDINATOR_ALARMS]
        names = own + list(queue_alarms)
        self.dashboard = QueueDashboard(
            self, "Dashboard", workers=workers, coordinator=coordinator, alarm_names=names
        )

    def _topic(self, alarm_email: str, encryption_key: kms.IKey | None) -> sns.Topic:
        topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name="S3Queue alarms",
            enforce_ssl=True,
            master_key=encryption_key,
        )
        # The topic policy replaces SNS's default one: without this, nothing may publish.
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions=from_cloudwatch_alarms(),
            )
        )
        if encryption_key is not None:
            # CloudWatch encrypts the alarm notifications it publishes to the topic.
            encryption_key.add_to_resource_policy(
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions=from_cloudwatch_alarms(),
                )
            )
        if alarm_email:
            topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        return topic

"""`Monitoring`: the alarms of every queue, sent to one SNS topic, and the stack's dashboard."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct
from s3queue import metric_names

from s3queue_cdk.dashboard import QueueDashboard, queue_metric

ALARM_PERIOD = Duration.minutes(5)


class Monitoring(Construct):
    """Per queue: DLQ not empty, oldest message too old, worker errors; coordinator errors.

    The topic is encrypted with the stack's KMS key when there is one (its key policy then lets
    CloudWatch publish). Without one it is not encrypted at rest: CloudWatch alarms cannot
    publish to a topic under the AWS-managed SNS key, and alarm messages carry only alarm and
    queue names, metric values and thresholds. AwsSolutions has no rule requiring it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workers: Mapping[str, lambda_.IFunction],
        coordinator: lambda_.IFunction,
        alarm_email: str,
        oldest_message_alarm: Duration,
        encryption_key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = self._topic(alarm_email, encryption_key)
        self.alarms: list[cw.Alarm] = []
        for queue, worker in workers.items():
            self.alarms += self._queue_alarms(queue, worker, oldest_message_alarm)
        self.alarms.append(
            self._errors_alarm(
                "CoordinatorErrors",
                f"{Stack.of(self).stack_name}-coordinator-errors",
                coordinator,
                "the coordinator itself failed",
            )
        )
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = QueueDashboard(
            self, "Dashboard", workers=workers, coordinator=coordinator, alarms=self.alarms
        )

    def _topic(self, alarm_email: str, encryption_key: kms.IKey | None) -> sns.Topic:
        topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name="S3Queue alarms",
            enforce_ssl=True,
            master_key=encryption_key,
        )
        if encryption_key is not None:
            # CloudWatch encrypts the alarm notifications it publishes to the topic.
            encryption_key.add_to_resource_policy(
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=["*"],
                )
            )
        if alarm_email:
            topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        return topic

    def _queue_alarms(
        self, queue: str, worker: lambda_.IFunction, oldest: Duration
    ) -> list[cw.Alarm]:
        dead = cw.Alarm(
            self,
            f"{queue}-DeadLetters",
            alarm_name=self._name(queue, "dead-letters"),
            alarm_description=(
                f"Queue {queue} has messages in its dead-letter queue: they failed every retry "
                "or raised PermanentError. Inspect them with the DLQ list, fix, and redrive."
            ),
            metric=queue_metric(queue, metric_names.DEAD_LETTERS, "Maximum", ALARM_PERIOD),
            threshold=0,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # A gauge the coordinator publishes while it runs: between ticks keep the state.
            treat_missing_data=cw.TreatMissingData.IGNORE,
        )
        age = cw.Alarm(
            self,
            f"{queue}-OldestMessageAge",
            alarm_name=self._name(queue, "oldest-message-age"),
            alarm_description=(
                f"Queue {queue}'s oldest pending message waited over {int(oldest.to_seconds())} s: "
                "the workers fall behind (raise concurrency or batch_size) or are failing."
            ),
            metric=queue_metric(queue, metric_names.OLDEST_MESSAGE_AGE, "Maximum", ALARM_PERIOD),
            threshold=oldest.to_seconds(),
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        errors = self._errors_alarm(
            f"{queue}-WorkerErrors",
            self._name(queue, "worker-errors"),
            worker,
            "the worker crashed or timed out outside the handler",
        )
        return [dead, age, errors]

    def _errors_alarm(
        self, construct_id: str, alarm_name: str, function: lambda_.IFunction, meaning: str
    ) -> cw.Alarm:
        return cw.Alarm(
            self,
            construct_id,
            alarm_name=alarm_name,
            alarm_description=(
                f"Lambda errors in {function.node.path}: {meaning} (a handler's exception is "
                "not one: it retries the message). See the function's log group."
            ),
            metric=function.metric_errors(period=ALARM_PERIOD, statistic="Sum"),
            threshold=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )

    def _name(self, queue: str, what: str) -> str:
        return f"{Stack.of(self).stack_name}-{queue}-{what}"

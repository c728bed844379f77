"""`QueueDashboard`: one CloudWatch dashboard per stack, a line per queue on each graph.

Each graph is one ``SEARCH`` expression, not a metric per queue: the dashboard's size does
not grow with the queues (a dashboard holds 2,500 metrics), and a new queue appears on it by
itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct
from s3queue.contract import metric_names

from s3queue_cdk.alarms import LAMBDA_NAMESPACE, alarm_arn, lambda_metric

PERIOD = Duration.minutes(1)
WIDTH = 8
ALARMS_PER_WIDGET = 100
"""CloudWatch's limit for one alarm status widget."""


def queue_search(name: str, statistic: str) -> cw.MathExpression:
    """Every queue's `name`, a line per queue labelled with the queue."""
    dims = f"{metric_names.DIMENSION_QUEUE},{metric_names.DIMENSION_SERVICE}"
    service = f'{metric_names.DIMENSION_SERVICE}="{metric_names.SERVICE}"'
    query = f'{{{metric_names.NAMESPACE},{dims}}} MetricName="{name}" {service}'
    return _search(query, statistic)


def workers_search(stack_name: str, name: str, statistic: str) -> cw.MathExpression:
    """Lambda's `name` for every worker of the stack (their names start with the stack's)."""
    query = f'{{{LAMBDA_NAMESPACE},FunctionName}} MetricName="{name}" FunctionName={stack_name}'
    return _search(query, statistic)


def _search(query: str, statistic: str) -> cw.MathExpression:
    """A SEARCH expression over the dashboard's period: a line per metric it finds."""
    return cw.MathExpression(
        expression=f"SEARCH('{query}', '{statistic}', {int(PERIOD.to_seconds())})",
        using_metrics={},
        period=PERIOD,
        label="",
    )


class QueueDashboard(Construct):
    """Depth, age, throughput, failures, DLQ, redeliveries, duration, Lambda health, alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workers: Mapping[str, str],
        coordinator: str,
        alarm_names: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        stack_name = Stack.of(self).stack_name
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{stack_name}-queues",
            default_interval=Duration.hours(3),
        )
        rows = [
            [
                ("Pending messages (depth)", metric_names.PENDING, "Maximum"),
                ("In flight", metric_names.IN_FLIGHT, "Maximum"),
                ("Oldest message age (s)", metric_names.OLDEST_MESSAGE_AGE, "Maximum"),
            ],
            [
                ("Processed per minute (throughput)", metric_names.PROCESSED, "Sum"),
                ("Handler failures per minute", metric_names.FAILED, "Sum"),
                ("Retries per minute", metric_names.RETRIED, "Sum"),
            ],
            [
                ("Dead letters (DLQ depth, busy ticks)", metric_names.DEAD_LETTERS, "Maximum"),
                ("Dead-lettered per minute", metric_names.DEAD_LETTERED, "Sum"),
                ("Redeliveries (lease expired)", metric_names.REDELIVERED, "Sum"),
            ],
            [
                ("Handler duration p50 (ms)", metric_names.HANDLER_DURATION, "p50"),
                ("Handler duration p99 (ms)", metric_names.HANDLER_DURATION, "p99"),
            ],
        ]
        for row in rows:
            self.dashboard.add_widgets(
                *(_graph(title, [queue_search(name, stat)]) for title, name, stat in row)
            )
        self.dashboard.add_widgets(
            _graph("Worker errors", [workers_search(stack_name, "Errors", "Sum")]),
            _graph("Worker throttles", [workers_search(stack_name, "Throttles", "Sum")]),
            _graph(
                "Worker events dropped (aged out)",
                [workers_search(stack_name, "AsyncEventsDropped", "Sum")],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Worker event age, max (ms)",
                [workers_search(stack_name, "AsyncEventAge", "Maximum")],
            ),
            _graph("Coordinator runs and failures", _coordinator_metrics(coordinator)),
            _graph(
                "Coordinator throttled and dropped starts",
                [
                    lambda_metric(coordinator, "Throttles", "Sum", PERIOD, "throttled"),
                    lambda_metric(coordinator, "AsyncEventsDropped", "Sum", PERIOD, "dropped"),
                ],
            ),
        )
        for start in range(0, len(alarm_names), ALARMS_PER_WIDGET):
            chunk = alarm_names[start : start + ALARMS_PER_WIDGET]
            self.dashboard.add_widgets(
                cw.AlarmStatusWidget(
                    title="Alarms",
                    alarms=[
                        cw.Alarm.from_alarm_arn(self, f"Alarm{start + i}", alarm_arn(name))
                        for i, name in enumerate(chunk)
                    ],
                    width=3 * WIDTH,
                )
            )
        self.queues = sorted(workers)


def _coordinator_metrics(coordinator: str) -> list[cw.IMetric]:
    return [
        lambda_metric(coordinator, "Invocations", "Sum", PERIOD, "runs"),
        lambda_metric(coordinator, "Errors", "Sum", PERIOD, "errors"),
    ]


def _graph(title: str, metrics: Sequence[cw.IMetric]) -> cw.GraphWidget:
    return cw.GraphWidget(title=title, width=WIDTH, left=list(metrics))

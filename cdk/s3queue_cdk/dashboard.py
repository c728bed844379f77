"""`QueueDashboard`: one CloudWatch dashboard per stack, a line per queue on each graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from s3queue import metric_names

PERIOD = Duration.minutes(1)
WIDTH = 8


def queue_metric(
    queue: str, name: str, statistic: str, period: Duration = PERIOD, label: str | None = None
) -> cw.Metric:
    """A metric of one queue, with the dimension set the functions publish it under."""
    return cw.Metric(
        namespace=metric_names.NAMESPACE,
        metric_name=name,
        dimensions_map=metric_names.dimensions(queue),
        statistic=statistic,
        period=period,
        label=label,
    )


class QueueDashboard(Construct):
    """Depth, in flight, age, throughput, failures, DLQ, redeliveries and handler duration."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workers: Mapping[str, lambda_.IFunction],
        coordinator: lambda_.IFunction,
        alarms: Sequence[cw.Alarm],
    ) -> None:
        super().__init__(scope, construct_id)
        queues = list(workers)
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{Stack.of(self).stack_name}-queues",
            default_interval=Duration.hours(3),
        )
        self.dashboard.add_widgets(
            _graph("Pending messages (depth)", queues, metric_names.PENDING, "Maximum"),
            _graph("In flight", queues, metric_names.IN_FLIGHT, "Maximum"),
            _graph("Oldest message age (s)", queues, metric_names.OLDEST_MESSAGE_AGE, "Maximum"),
        )
        self.dashboard.add_widgets(
            _graph("Processed per minute (throughput)", queues, metric_names.PROCESSED, "Sum"),
            _graph("Handler failures per minute", queues, metric_names.FAILED, "Sum"),
            _graph("Retries per minute", queues, metric_names.RETRIED, "Sum"),
        )
        self.dashboard.add_widgets(
            _graph("Dead letters (DLQ depth)", queues, metric_names.DEAD_LETTERS, "Maximum"),
            _graph("Dead-lettered per minute", queues, metric_names.DEAD_LETTERED, "Sum"),
            _graph("Redeliveries (lease expired)", queues, metric_names.REDELIVERED, "Sum"),
        )
        self.dashboard.add_widgets(
            _graph("Handler duration p50 (ms)", queues, metric_names.HANDLER_DURATION, "p50"),
            _graph("Handler duration p99 (ms)", queues, metric_names.HANDLER_DURATION, "p99"),
            cw.GraphWidget(
                title="Lambda errors",
                width=WIDTH,
                left=[
                    *(w.metric_errors(period=PERIOD, label=q) for q, w in workers.items()),
                    coordinator.metric_errors(period=PERIOD, label="(coordinator)"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=3 * WIDTH)
        )


def _graph(title: str, queues: Sequence[str], name: str, statistic: str) -> cw.GraphWidget:
    return cw.GraphWidget(
        title=title,
        width=WIDTH,
        left=[queue_metric(queue, name, statistic, label=queue) for queue in queues],
    )

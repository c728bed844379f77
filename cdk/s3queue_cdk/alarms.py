"""The alarms: what each watches, and why missing data means what it means for it.

Per queue: a dead letter appeared, the oldest message waits too long, the worker is unhealthy
(errors, throttles, dropped asynchronous events). For the stack: the coordinator failed, or
it stopped running at all.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct
from s3queue.contract import metric_names

ALARM_PERIOD = Duration.minutes(5)
DAY_SECONDS = 86_400
LAMBDA_NAMESPACE = "AWS/Lambda"
QUEUE_ALARMS = ("dead-letters", "oldest-message-age", "worker")
COORDINATOR_ALARMS = ("coordinator-errors", "coordinator-silent")


def queue_metric(
    queue: str, name: str, statistic: str, period: Duration, label: str | None = None
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


def lambda_metric(
    function_name: str, name: str, statistic: str, period: Duration, label: str | None = None
) -> cw.Metric:
    """A metric Lambda publishes for a function, by the function's name."""
    return cw.Metric(
        namespace=LAMBDA_NAMESPACE,
        metric_name=name,
        dimensions_map={"FunctionName": function_name},
        statistic=statistic,
        period=period,
        label=label,
    )


def alarm_name(stack_name: str, queue: str | None, what: str) -> str:
    """``<stack>-<queue>-<what>``, or ``<stack>-<what>`` for the stack's own alarms."""
    return f"{stack_name}-{queue}-{what}" if queue else f"{stack_name}-{what}"


def alarm_arn(name: str) -> str:
    """An alarm's ARN from its name: the dashboard needs no reference into a nested stack."""
    return f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:{name}"


def queue_alarm_names(stack_name: str, queue: str) -> list[str]:
    return [alarm_name(stack_name, queue, what) for what in QUEUE_ALARMS]


def queue_alarms(
    scope: Construct, *, stack_name: str, queue: str, worker: str, oldest: Duration
) -> list[cw.Alarm]:
    """The three alarms of one queue; `worker` is its function's name."""
    dead = cw.Alarm(
        scope,
        f"{queue}-DeadLetters",
        alarm_name=alarm_name(stack_name, queue, "dead-letters"),
        alarm_description=(
            f"Queue {queue} dead-lettered a message (it failed every retry or raised "
            "PermanentError), or its DLQ was not empty when the coordinator last counted it. "
            "Read the errors with `s3queue dlq list`, fix, then redrive."
        ),
        # The workers count each dead letter when it happens; the coordinator's gauge covers
        # moves it made itself. Missing data is a period without either: no new dead letter.
        metric=cw.MathExpression(
            expression="FILL(lettered, 0) + FILL(letters, 0)",
            using_metrics={
                "lettered": queue_metric(queue, metric_names.DEAD_LETTERED, "Sum", ALARM_PERIOD),
                "letters": queue_metric(queue, metric_names.DEAD_LETTERS, "Maximum", ALARM_PERIOD),
            },
            period=ALARM_PERIOD,
            label="dead letters",
        ),
        threshold=0,
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
    )
    age = cw.Alarm(
        scope,
        f"{queue}-OldestMessageAge",
        alarm_name=alarm_name(stack_name, queue, "oldest-message-age"),
        alarm_description=(
            f"Queue {queue}'s oldest pending message waited over {int(oldest.to_seconds())} s: "
            "the workers fall behind (raise concurrency or batch_size) or are failing."
        ),
        metric=queue_metric(queue, metric_names.OLDEST_MESSAGE_AGE, "Maximum", ALARM_PERIOD),
        threshold=oldest.to_seconds(),
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        # No gauge means no coordinator run: the stack's coordinator-silent alarm says so.
        treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
    )
    return [dead, age, worker_alarm(scope, stack_name=stack_name, queue=queue, worker=worker)]


def worker_alarm(scope: Construct, *, stack_name: str, queue: str, worker: str) -> cw.Alarm:
    """Errors, throttles and dropped asynchronous events of a queue's worker, summed."""
    return cw.Alarm(
        scope,
        f"{queue}-Worker",
        alarm_name=alarm_name(stack_name, queue, "worker"),
        alarm_description=(
            f"Queue {queue}'s worker Lambda failed (crash, or timeout outside a handler: a "
            "handler's exception only retries its message), was throttled (account concurrency "
            "exhausted), or dropped invocations that aged out. See its log group; messages of "
            "a dropped invocation are redelivered when their ticket's lease expires."
        ),
        metric=cw.MathExpression(
            expression="FILL(errors, 0) + FILL(throttles, 0) + FILL(dropped, 0)",
            using_metrics={
                "errors": lambda_metric(worker, "Errors", "Sum", ALARM_PERIOD),
                "throttles": lambda_metric(worker, "Throttles", "Sum", ALARM_PERIOD),
                "dropped": lambda_metric(worker, "AsyncEventsDropped", "Sum", ALARM_PERIOD),
            },
            period=ALARM_PERIOD,
            label="errors + throttles + dropped events",
        ),
        threshold=1,
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
    )


def silence_window(schedule_seconds: int | None) -> Duration:
    """How long without a coordinator run is an alarm: three schedule intervals, 5 min to 1 day.

    A ``cron(...)`` schedule has no fixed interval: its window is a day.
    """
    if schedule_seconds is None:
        return Duration.seconds(DAY_SECONDS)
    minutes = -(-3 * schedule_seconds // 60)
    return Duration.seconds(min(DAY_SECONDS, max(300, minutes * 60)))


def coordinator_alarms(
    scope: Construct, *, stack_name: str, coordinator: str, window: Duration
) -> list[cw.Alarm]:
    """The coordinator failed; the coordinator did not run for `window` (missing = breaching)."""
    errors = cw.Alarm(
        scope,
        "CoordinatorErrors",
        alarm_name=alarm_name(stack_name, None, COORDINATOR_ALARMS[0]),
        alarm_description=(
            "The coordinator Lambda failed: read its log group. Messages wait until it recovers."
        ),
        metric=lambda_metric(coordinator, "Errors", "Sum", ALARM_PERIOD),
        threshold=1,
        comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
    )
    silent = cw.Alarm(
        scope,
        "CoordinatorSilent",
        alarm_name=alarm_name(stack_name, None, COORDINATOR_ALARMS[1]),
        alarm_description=(
            f"The coordinator did not run for {int(window.to_minutes())} minutes: its schedule "
            "is disabled or deleted, or every start was throttled. No message is dispatched "
            "until it runs again."
        ),
        metric=lambda_metric(coordinator, "Invocations", "Sum", window),
        threshold=1,
        comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=1,
        # Lambda publishes no Invocations datapoint for a period without one.
        treat_missing_data=cw.TreatMissingData.BREACHING,
    )
    return [errors, silent]

"""`QueueFunction`: the Lambda shape every S3Queue function shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from s3queue.contract import metric_names, tracing
from s3queue.errors import ConfigError

from s3queue_cdk.acknowledgements import acknowledge

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
"""Graviton: about 20% cheaper per GB-second than x86_64; the code is pure Python."""
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
POWERTOOLS_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE,
    "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE,
}
ENVIRONMENT_MAX = 4096
"""Lambda's limit on the total size of a function's environment variables (names and values)."""
TOKEN_MAX = 63
"""Counted for each unresolved token in a value: the longest bucket name it can become."""


def environment_size(environment: Mapping[str, str]) -> int:
    """The bytes Lambda counts, with every deploy-time token at its longest."""
    size = 0
    for name, value in environment.items():
        tokens = len(Token.as_string(value).split("${Token[")) - 1
        size += len(name.encode()) + len(value.encode()) + tokens * TOKEN_MAX
    return size


class QueueFunction(Construct):
    """A Python 3.12 arm64 Lambda, traced, with its own log group and a role that starts empty.

    The role gets no AWS managed policy: it may write to its own log group, X-Ray, and what
    the stack grants it. Asynchronous invocations are not retried by Lambda: the queue protocol
    redelivers by lease expiry, and the schedule starts a new coordinator every tick.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        description: str,
        layers: Sequence[lambda_.ILayerVersion],
        environment: Mapping[str, str],
        function_name: str | None = None,
        encryption_key: kms.IKey | None = None,
        timeout: Duration,
        memory: int,
        reserved_concurrency: int | None,
        max_event_age: Duration,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        variables = {**environment, **POWERTOOLS_ENVIRONMENT}
        # counted with the variable `s3queue:traceCalls` may add (stack.py), set or not
        size = environment_size({**variables, tracing.ENV_TRACE_CALLS: "1"})
        if size > ENVIRONMENT_MAX:
            raise ConfigError(
                f"{description}: its environment variables take {size} "
                f"bytes, over Lambda's {ENVIRONMENT_MAX}: split the queues over two stacks"
            )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=LOG_RETENTION,
            removal_policy=removal_policy,
            encryption_key=encryption_key,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=description,
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=code,
            handler=handler,
            description=description,
            layers=list(layers),
            function_name=function_name,
            environment=variables,
            role=self.role,
            log_group=self.log_group,
            timeout=timeout,
            memory_size=memory,
            reserved_concurrent_executions=reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            retry_attempts=0,
            max_event_age=max_event_age,
        )
        acknowledge(
            self.function,
            "L1",
            "Python 3.12 is pinned: the public Powertools layer used is its python312 build, "
            "and 3.12 is the runtime the layer code is tested on. Upgrade both together.",
        )
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            "X-Ray PutTraceSegments and PutTelemetryRecords support no resource-level "
            "permissions: the tracing statement CDK adds must name Resource '*'.",
        )

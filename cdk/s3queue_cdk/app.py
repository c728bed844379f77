"""Build the CDK app: the stack named by the context, checked by cdk-nag's AwsSolutions pack."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from s3queue_cdk.settings import DeploymentSettings
from s3queue_cdk.stack import FUNCTIONS_DIR, S3QueueStack


def build(
    app: App, *, functions_dir: Path = FUNCTIONS_DIR, handlers_dir: Path | None = None
) -> S3QueueStack:
    """Add the stack to `app`, configured by its context; synth fails on any nag finding.

    `handlers_dir` defaults to ``<functions_dir>/handlers``.
    """
    settings = DeploymentSettings.from_context(app.node)
    stack = S3QueueStack(
        app,
        settings.stack_name,
        settings=settings,
        functions_dir=functions_dir,
        handlers_dir=handlers_dir,
        description="S3Queue: distributed worker queues backed only by Amazon S3",
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack

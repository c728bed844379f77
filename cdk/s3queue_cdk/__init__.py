"""The S3Queue CDK app: one Stack composed of small Constructs, one module per component.

Another CDK app uses it as ``S3QueueStack(app, "Jobs", handlers_dir=Path("jobs"))``, or
``build(app, handlers_dir=...)`` for the stack configured by the app's context and checked by
cdk-nag (``pip install 's3queue[cdk]'``).
"""

from s3queue_cdk.app import build
from s3queue_cdk.settings import DeploymentSettings
from s3queue_cdk.stack import S3QueueStack

__all__ = ["DeploymentSettings", "S3QueueStack", "build"]

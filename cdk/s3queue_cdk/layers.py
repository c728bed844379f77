"""`Layers`: the s3queue layer built from this repository, and AWS's public Powertools layer."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Aws
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from s3queue.contract.packaging import LAYER_EXCLUDES, LOCAL_TOOLS, PACKAGE_DIR

from s3queue_cdk.bundling import package_layer_code
from s3queue_cdk.functions import ARCHITECTURE, RUNTIME

POWERTOOLS_ACCOUNT = "017000801446"
"""AWS's account that publishes Powertools for AWS Lambda (Python) in the commercial regions."""
POWERTOOLS_LAYER = "AWSLambdaPowertoolsPythonV3-python312-arm64"
"""The build matching `RUNTIME` and `ARCHITECTURE`."""


def powertools_layer_arn(version: int) -> str:
    """The public layer's ARN in the stack's partition and region (tokens until deployment)."""
    return (
        f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
        f"{POWERTOOLS_LAYER}:{version}"
    )


class Layers(Construct):
    """The layers every function uses: ``s3queue`` (queue logic) and Powertools (observability).

    ``layer_dir`` holds ``python/s3queue/``: Lambda puts a layer's ``python/`` on ``sys.path``.
    `LAYER_EXCLUDES` leaves out the local tools (``s3queue/local/``) and bytecode. Without a
    ``layer_dir`` (an installed package, not a checkout) the imported ``s3queue`` package is
    copied into ``python/s3queue/``, minus the same.
    The s3queue package needs only boto3, which the Lambda runtime ships, so nothing else is
    bundled. Powertools comes from AWS's public layer rather than a copy in ours: AWS builds it
    for each runtime and architecture, and ``powertools_version`` pins it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_dir: Path | None,
        powertools_version: int,
        powertools_arn: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.s3queue = lambda_.LayerVersion(
            self,
            "S3Queue",
            code=_layer_code(layer_dir),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="S3Queue: the queue logic shared by the coordinator and the workers",
        )
        self.powertools_arn = powertools_arn or powertools_layer_arn(powertools_version)
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools", self.powertools_arn
        )

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.powertools, self.s3queue]


def _layer_code(layer_dir: Path | None) -> lambda_.Code:
    if layer_dir is not None:
        return lambda_.Code.from_asset(str(layer_dir), exclude=list(LAYER_EXCLUDES))
    return package_layer_code(PACKAGE_DIR, leave_out=[LOCAL_TOOLS])

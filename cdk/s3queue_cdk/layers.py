"""`Layers`: the s3queue layer built from this repository, and AWS's public Powertools layer."""

from __future__ import annotations

import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from aws_cdk import Aws, Stage
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from s3queue.contract.packaging import LAYER_DEPENDENCIES, PACKAGE_DIR, shipped
from s3queue.errors import ConfigError

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
    The s3queue package needs boto3, which the Lambda runtime ships, and the pure-Python
    `LAYER_DEPENDENCIES` (cronsim, for cron schedules), which `stage_layer` copies beside it
    from the environment that synthesizes, with their licences, into the cloud assembly.
    Powertools comes from AWS's public layer rather than a copy in ours: AWS builds it for
    each runtime and architecture, and ``powertools_version`` pins it.
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
        stage = Stage.of(self)
        assembly = Path(stage.outdir) if stage is not None else Path(tempfile.mkdtemp())
        staged = stage_layer(layer_dir, assembly / "s3queue-layer")
        self.s3queue = lambda_.LayerVersion(
            self,
            "S3Queue",
            code=lambda_.Code.from_asset(str(staged)),
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


def stage_layer(layer_dir: Path | None, into: Path) -> Path:
    """`into`, emptied, then filled with what the layer ships: the shipped files of
    `layer_dir` (None: of the imported package, as ``python/s3queue/``) and, under
    ``python/``, every file of each of `LAYER_DEPENDENCIES`."""
    shutil.rmtree(into, ignore_errors=True)
    root = layer_dir if layer_dir is not None else PACKAGE_DIR
    above = Path() if layer_dir is not None else Path("python", PACKAGE_DIR.name)
    for path in sorted(root.rglob("*")):
        relative = above / path.relative_to(root)
        if path.is_file() and shipped(relative.as_posix()):
            _copy(path, into / relative)
    for name in LAYER_DEPENDENCIES:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError as exc:
            raise ConfigError(f"the layer bundles {name}: install it where you synthesize") from exc
        for file in files:
            source = Path(str(file.locate()))
            if shipped(file.as_posix()) and source.is_file() and file.parts[0] != "..":
                _copy(source, into / "python" / file.as_posix())
    return into


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)

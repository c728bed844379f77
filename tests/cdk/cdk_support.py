"""Build the CDK app as ``cdk/app.py`` does, and read its template; shared by the CDK tests.

`Template.from_stack` runs the app's validation plugins, so building a fixture already proves
that cdk-nag's AwsSolutions pack has no unacknowledged finding on that variant. CloudFormation's
built-in template validation is switched off here (it takes most of a synth's time); `make
synth` runs it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "cdk"))

from aws_cdk import App, Stack, assertions  # noqa: E402
from aws_cdk import aws_iam as iam  # noqa: E402
from s3queue.contract.environment import ENV_QUEUE  # noqa: E402
from s3queue_cdk.app import build  # noqa: E402
from s3queue_cdk.stack import FUNCTIONS_DIR, S3QueueStack  # noqa: E402

CDK_CONTEXT: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]
VARIANT_CONTEXT = {
    "s3queue:kms": True,
    "s3queue:lowLatency": "true",  # as `cdk deploy -c s3queue:lowLatency=true` passes it
    "s3queue:alarmEmail": "ops@example.com",
    "s3queue:versioned": True,
    "s3queue:retainData": False,
    "s3queue:bucketNamePrefix": "acme-queues",
    "s3queue:reserveConcurrency": False,
    "s3queue:prefix": "jobs/prod",
    "s3queue:schedule": "rate(2 minutes)",
    "s3queue:dlqRetentionDays": "30",
    "s3queue:idempotencyRetentionDays": 3,
    "s3queue:traceCalls": True,
    "s3queue:coordinatorMemory": "1769",
}


@dataclass
class Synth:
    """A synthesized stack, its template and its nested stacks' (the queue groups)."""

    stack: S3QueueStack
    template: assertions.Template
    nested: list[assertions.Template]

    @property
    def templates(self) -> list[dict[str, Any]]:
        return [t.to_json() for t in (self.template, *self.nested)]

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """Every resource of the stack and its nested stacks, by logical id."""
        return {k: r for t in self.templates for k, r in t["Resources"].items()}

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == kind}

    def workers(self) -> dict[str, dict[str, Any]]:
        """Worker function properties by queue."""
        return {
            props["Environment"]["Variables"][ENV_QUEUE]: props
            for props in (r["Properties"] for r in self.of_type("AWS::Lambda::Function").values())
            if props.get("Handler") == "worker.app.handler"
        }

    def coordinator(self) -> dict[str, Any]:
        props: dict[str, Any]
        (props,) = [
            r["Properties"]
            for r in self.of_type("AWS::Lambda::Function").values()
            if r["Properties"].get("Handler") == "app.handler"
        ]
        return props

    def logical_id(self, construct: Any) -> str:
        return str(Stack.of(construct).get_logical_id(construct.node.default_child))


def synth(
    context: Mapping[str, Any] | None = None,
    *,
    functions_dir: Path = FUNCTIONS_DIR,
    producer_queue: str | None = None,
) -> Synth:
    """Build the app as ``cdk/app.py`` does, with cdk.json's context plus `context`."""
    app = App(context={**CDK_CONTEXT, **(context or {})}, builtin_cloud_formation_validation=False)
    stack = build(app, functions_dir=functions_dir)
    if producer_queue is not None:
        producer = iam.Role(stack, "Producer", assumed_by=iam.AccountRootPrincipal())
        stack.grant_enqueue(producer, producer_queue)
    template = assertions.Template.from_stack(stack)
    nested = [assertions.Template.from_stack(group) for group in stack.groups]
    return Synth(stack, template, nested)


def render(value: Any) -> Any:
    """`value` with ``Ref`` as ``<Id>``, ``Fn::GetAtt`` as ``<Id.Attr>``, ``Fn::Join`` joined."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(render(part)) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict):
        return {key: render(item) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item) for item in value]
    return value

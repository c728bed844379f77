"""cdk-nag acknowledgements, made next to their cause: each names one finding and says why."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge `finding` (``"L1"``, ``"IAM5[Resource::*]"``) on `scope` and its children."""
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{PACK}-{finding}", reason=reason))


def arn_reference(scope: IConstruct, arn: str) -> str:
    """How cdk-nag prints an ARN token: ``<Id.Arn>`` for ``Fn::GetAtt``, ``<Id>`` for ``Ref``."""
    resolved = Stack.of(scope).resolve(arn)
    if isinstance(resolved, dict) and "Fn::GetAtt" in resolved:
        logical_id, attribute = resolved["Fn::GetAtt"]
        return f"<{logical_id}.{attribute}>"
    if isinstance(resolved, dict) and "Ref" in resolved:
        return f"<{resolved['Ref']}>"
    return str(resolved)

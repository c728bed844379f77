"""The deployment rehearsal's reading of ``cdk.out`` and its checks of the calls made.

`Deployment` reads a synthesized cloud assembly (the parent template and its nested ones)
and resolves every token the functions' environments and role policies hold, as
CloudFormation would for one account and region (`lambda_service.py` runs the functions).
`requests_of` turns a recorded SDK call into IAM requests, `allowed` evaluates one against a
role's statements (Allow and Deny, action and resource wildcards, String conditions), and
`emf_values` reads a metric out of embedded-metric log lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REGION, ACCOUNT, PARTITION = "us-east-1", "123456789012", "aws"
PSEUDO = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": PARTITION,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "S3Queue",
}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


class Resolver:
    """Refs and GetAtts of one template, with its parameters' values."""

    def __init__(self, resources: dict[str, Any], names: dict[str, str], params: dict[str, str]):
        self.resources, self.names, self.params = resources, names, params

    def ref(self, logical_id: str) -> str:
        if logical_id in PSEUDO:
            return PSEUDO[logical_id]
        if logical_id in self.params:
            return self.params[logical_id]
        if logical_id in self.names:
            return self.names[logical_id]
        props = self.resources[logical_id].get("Properties", {})
        return str(props.get("FunctionName") or f"S3Queue-{logical_id}")

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        name = self.ref(logical_id)
        if kind == "AWS::S3::Bucket":
            return f"arn:aws:s3:::{name}"
        if kind == "AWS::Lambda::Function":
            return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
        service = kind.split("::")[1].lower()
        return f"arn:aws:{service}:{REGION}:{ACCOUNT}:{name}"

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "Ref" in value:
            return self.ref(value["Ref"])
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            if attribute != "Arn":
                raise ValueError(f"cannot resolve {value}")
            return self.arn(logical_id)
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(self(p)) for p in parts)
        if "Fn::Sub" in value:
            text = value["Fn::Sub"]
            for name, pseudo in PSEUDO.items():
                text = text.replace("${" + name + "}", pseudo)
            return text
        return {k: self(v) for k, v in value.items()}


@dataclass
class Function:
    """One Lambda function of the template, resolved."""

    logical_id: str
    name: str
    handler: str
    task_root: Path
    environment: dict[str, str]
    timeout: int
    memory: int
    concurrency: int | None
    statements: list[dict[str, Any]]


@dataclass
class Deployment:
    """The functions, rules and alarms of a synthesized assembly, tokens resolved."""

    outdir: Path
    bucket: str
    functions: dict[str, Function] = field(default_factory=dict)
    alarms: dict[str, dict[str, Any]] = field(default_factory=dict)
    schedule_targets: list[str] = field(default_factory=list)
    layer_python: Path | None = None

    @classmethod
    def read(cls, outdir: Path, stack: str, bucket_id: str, bucket: str) -> Deployment:
        deployment = cls(outdir, bucket)
        assets = deployment._assets(stack)
        parent = json.loads((outdir / f"{stack}.template.json").read_text())
        names = {bucket_id: bucket}
        resolver = Resolver(parent["Resources"], names, {})
        deployment._read(parent, resolver, assets)
        for resource in parent["Resources"].values():
            if resource["Type"] == "AWS::CloudFormation::Stack":
                props = resource["Properties"]
                key = [p for p in props["TemplateURL"]["Fn::Join"][1] if isinstance(p, str)][-1]
                nested = json.loads((outdir / assets[key.rsplit("/", 1)[-1]]).read_text())
                params = {k: str(resolver(v)) for k, v in props.get("Parameters", {}).items()}
                deployment._read(nested, Resolver(nested["Resources"], {}, params), assets)
        return deployment

    def _assets(self, stack: str) -> dict[str, str]:
        """S3 object key -> asset path in the assembly."""
        manifest = json.loads((self.outdir / f"{stack}.assets.json").read_text())
        found = {}
        for asset in manifest["files"].values():
            for destination in asset["destinations"].values():
                found[destination["objectKey"]] = asset["source"]["path"]
        return found

    def _read(self, template: dict[str, Any], resolve: Resolver, assets: dict[str, str]) -> None:
        resources = template["Resources"]
        for logical_id, resource in resources.items():
            kind, props = resource["Type"], resource.get("Properties", {})
            if kind == "AWS::Lambda::LayerVersion":
                self.layer_python = self.outdir / assets[props["Content"]["S3Key"]] / "python"
            elif kind == "AWS::Lambda::Function":
                self._function(logical_id, props, resolve, resources, assets)
            elif kind == "AWS::CloudWatch::Alarm":
                self.alarms[props["AlarmName"]] = resolve(props)
            elif kind == "AWS::Events::Rule" and "ScheduleExpression" in props:
                self.schedule_targets += [str(resolve(t["Arn"])) for t in props["Targets"]]

    def _function(
        self,
        logical_id: str,
        props: dict[str, Any],
        resolve: Resolver,
        resources: dict[str, Any],
        assets: dict[str, str],
    ) -> None:
        role_id = props["Role"]["Fn::GetAtt"][0]
        statements = [
            resolve(statement)
            for policy in resources.values()
            if policy["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_id} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        ]
        name = resolve.ref(logical_id)
        self.functions[name] = Function(
            logical_id=logical_id,
            name=name,
            handler=props["Handler"],
            task_root=self.outdir / assets[props["Code"]["S3Key"]],
            environment={k: str(resolve(v)) for k, v in props["Environment"]["Variables"].items()},
            timeout=int(props["Timeout"]),
            memory=int(props["MemorySize"]),
            concurrency=props.get("ReservedConcurrentExecutions"),
            statements=statements,
        )

    def by_arn(self, arn: str) -> Function:
        return self.functions[arn.rsplit(":", 1)[-1]]


def requests_of(call: dict[str, Any], bucket: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """The IAM (action, resource, context) requests one SDK call makes."""
    service, operation, params = call["service"], call["operation"], call["params"]
    objects = f"arn:aws:s3:::{params.get('Bucket', bucket)}/"
    if service == "lambda" and operation == "Invoke":
        name = params["FunctionName"]
        yield "lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}", {}
    elif operation in ("GetObject", "HeadObject"):
        yield "s3:GetObject", objects + params["Key"], {}
    elif operation == "PutObject":
        yield "s3:PutObject", objects + params["Key"], {}
    elif operation == "CopyObject":
        source = params["CopySource"]
        source = source if isinstance(source, str) else f"{source['Bucket']}/{source['Key']}"
        yield "s3:GetObject", "arn:aws:s3:::" + unquote(source.lstrip("/")), {}
        yield "s3:PutObject", objects + params["Key"], {}
    elif operation == "DeleteObject":
        yield "s3:DeleteObject", objects + params["Key"], {}
    elif operation == "DeleteObjects":
        for key in params["Keys"]:
            yield "s3:DeleteObject", objects + key, {}
    elif operation in ("ListObjectsV2", "ListObjects"):
        context = {"s3:prefix": params["Prefix"]} if "Prefix" in params else {}
        yield "s3:ListBucket", f"arn:aws:s3:::{params['Bucket']}", context
    else:
        raise AssertionError(f"no IAM mapping for {service}:{operation}")


def allowed(
    statements: list[dict[str, Any]], action: str, resource: str, context: dict[str, str]
) -> bool:
    """Whether an Allow statement grants the request and no Deny refuses it."""
    matching = [s for s in statements if _matches(s, action, resource, context)]
    return any(s["Effect"] == "Allow" for s in matching) and not any(
        s["Effect"] == "Deny" for s in matching
    )


def _matches(
    statement: dict[str, Any], action: str, resource: str, context: dict[str, str]
) -> bool:
    if not any(fnmatchcase(action, a) for a in as_list(statement["Action"])):
        return False
    if not any(fnmatchcase(resource, r) for r in as_list(statement.get("Resource", "*"))):
        return False
    for operator, tests in statement.get("Condition", {}).items():
        for key, expected in tests.items():
            value = context.get(key)
            if value is None:
                return False
            if operator == "StringLike" and not any(
                fnmatchcase(value, e) for e in as_list(expected)
            ):
                return False
            if operator == "StringEquals" and value not in as_list(expected):
                return False
    return True


def emf_values(lines: list[str], namespace: str, name: str, dimensions: dict[str, str]) -> float:
    """The sum of an embedded-metrics metric over log lines, for exactly that dimension set."""
    total = 0.0
    for line in lines:
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            names = {m["Name"] for m in directive["Metrics"]}
            dimension_sets = [sorted(d) for d in directive["Dimensions"]]
            if directive["Namespace"] != namespace or name not in names:
                continue
            if sorted(dimensions) in dimension_sets and all(
                doc.get(k) == v for k, v in dimensions.items()
            ):
                total += sum(as_list(doc[name]))
    return total

"""The deployment rehearsal's machinery: read ``cdk.out``, run its Lambdas, check their calls.

`Deployment` reads a synthesized cloud assembly (the parent template and its nested ones)
and resolves every token the functions' environments and role policies hold, as
CloudFormation would for one account and region. `LambdaService` runs a function's
invocation in its own process (`lambda_bootstrap.py`) and stands in for the Lambda API the
coordinator invokes through (``AWS_ENDPOINT_URL_LAMBDA``), running asynchronous invokes with
at most the function's reserved concurrency at once. `allowed` evaluates an IAM request
against a role's statements (Allow, action and resource wildcards, String conditions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REGION, ACCOUNT, PARTITION = "us-east-1", "123456789012", "aws"
BOOTSTRAP = Path(__file__).with_name("lambda_bootstrap.py")
RESULT = "REHEARSAL-RESULT "
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


@dataclass
class Invocation:
    function: str
    result: Any
    stdout: list[str]
    returncode: int
    stderr: str


class LambdaService:
    """Runs invocations in processes; serves ``Invoke`` for the functions of a deployment."""

    def __init__(self, deployment: Deployment, s3_endpoint: str, workdir: Path) -> None:
        self.deployment, self.s3_endpoint, self.workdir = deployment, s3_endpoint, workdir
        self.invocations: list[Invocation] = []
        self.pending: list[Future[Invocation]] = []
        self.most_at_once: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pools = {
            name: ThreadPoolExecutor(max_workers=f.concurrency or 64)
            for name, f in deployment.functions.items()
        }
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        for pool in self._pools.values():
            pool.shutdown(wait=True)

    def invoke_async(self, name: str, event: dict[str, Any]) -> None:
        with self._lock:
            self.pending.append(self._pools[name].submit(self.invoke, name, event))

    def join(self) -> None:
        """Wait until every asynchronous invocation (and any it started) has finished."""
        while True:
            with self._lock:
                waiting = [f for f in self.pending if not f.done()]
            if not waiting:
                return
            for future in waiting:
                future.result()

    def invoke(self, name: str, event: dict[str, Any]) -> Invocation:
        function = self.deployment.functions[name]
        with self._lock:
            self._running[name] = self._running.get(name, 0) + 1
            self.most_at_once[name] = max(self.most_at_once.get(name, 0), self._running[name])
            calls = self.workdir / f"{name}-{len(self.invocations) + len(self.pending)}.jsonl"
        try:
            invocation = self._run(function, event, calls)
        finally:
            with self._lock:
                self._running[name] -= 1
        with self._lock:
            self.invocations.append(invocation)
        return invocation

    def _run(self, function: Function, event: dict[str, Any], calls: Path) -> Invocation:
        spec = {
            "name": function.name,
            "handler": function.handler,
            "task_root": str(function.task_root),
            "layer_python": str(self.deployment.layer_python),
            "memory": function.memory,
            "timeout": function.timeout,
        }
        done = subprocess.run(
            [sys.executable, str(BOOTSTRAP), json.dumps(spec)],
            input=json.dumps(event),
            env={**self._runtime_env(function), "REHEARSAL_CALLS": str(calls)},
            capture_output=True,
            text=True,
            timeout=function.timeout + 60,
            check=False,
        )
        lines = done.stdout.splitlines()
        results = [json.loads(line[len(RESULT) :]) for line in lines if line.startswith(RESULT)]
        return Invocation(
            function.name, results[0] if results else None, lines, done.returncode, done.stderr
        )

    def _runtime_env(self, function: Function) -> dict[str, str]:
        """The template's variables, plus what Lambda sets, pointed at the stand-ins."""
        return {
            **function.environment,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "rehearsal",
            "AWS_SECRET_ACCESS_KEY": "rehearsal",
            "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory),
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_ENDPOINT_URL_S3": self.s3_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": self.endpoint,
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
            "PATH": os.environ.get("PATH", ""),
        }

    def calls(self) -> dict[str, list[dict[str, Any]]]:
        """Every recorded SDK call, by the function that made it."""
        found: dict[str, list[dict[str, Any]]] = {}
        for path in sorted(self.workdir.glob("*.jsonl")):
            name = path.name.rsplit("-", 1)[0]
            found.setdefault(name, []).extend(
                json.loads(line) for line in path.read_text().splitlines()
            )
        return found

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                name = unquote(self.path.split("/functions/", 1)[1].split("/", 1)[0])
                name = name.rsplit(":", 1)[-1] if name.startswith("arn:") else name
                if name not in service.deployment.functions:
                    self._answer(404, {"Type": "User", "message": f"Function not found: {name}"})
                    return
                if self.headers.get("X-Amz-Invocation-Type") != "Event":
                    self._answer(400, {"Type": "User", "message": "only Event invokes here"})
                    return
                service.invoke_async(name, json.loads(body or b"{}"))
                self._answer(202, None)

            def _answer(self, status: int, error: dict[str, str] | None) -> None:
                payload = json.dumps(error).encode() if error else b""
                self.send_response(status)
                if error:
                    kind = "ResourceNotFoundException" if status == 404 else "InvalidRequest"
                    self.send_header("x-amzn-ErrorType", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


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

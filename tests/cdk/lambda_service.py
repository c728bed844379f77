"""`LambdaService`: runs a deployment's functions as Lambda would, one process an invocation.

Each invocation runs `lambda_bootstrap.py` in a fresh process with the function's template
environment and what Lambda sets. The service also stands in for the Lambda API the
coordinator invokes through (``AWS_ENDPOINT_URL_LAMBDA``): an asynchronous invoke is queued
and run with at most the function's reserved concurrency at once, as Lambda's own queue for
throttled events would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from rehearsal import REGION, Deployment, Function

BOOTSTRAP = Path(__file__).with_name("lambda_bootstrap.py")
RESULT = "REHEARSAL-RESULT "
MODULES = "REHEARSAL-MODULES "


@dataclass
class Invocation:
    function: str
    result: Any
    stdout: list[str]
    returncode: int
    stderr: str
    modules: dict[str, str]
    """Module name -> the file it was loaded from (outside the standard library)."""


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
        modules = [json.loads(line[len(MODULES) :]) for line in lines if line.startswith(MODULES)]
        return Invocation(
            function.name,
            results[0] if results else None,
            lines,
            done.returncode,
            done.stderr,
            modules[0] if modules else {},
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

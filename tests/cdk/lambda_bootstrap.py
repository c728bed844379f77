"""Run one Lambda invocation as the service would: ``python lambda_bootstrap.py SPEC_JSON``.

The deployment rehearsal starts this in a fresh process per invocation, with exactly the
function's template environment plus what Lambda itself sets, the function's asset as the
task root (first on ``sys.path``, and the working directory) and the layer asset's
``python/`` after it. Every AWS SDK call the function makes is appended to the file named by
``REHEARSAL_CALLS`` (removed from the environment before the handler's module loads). The
event is read from stdin; the handler's result is the last stdout line, after `RESULT`, and
where every module outside the standard library was loaded from is the line before, after
`MODULES` (so a test can tell a package of the asset from one of the test's virtualenv).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

RESULT = "REHEARSAL-RESULT "
MODULES = "REHEARSAL-MODULES "
KEPT_PARAMS = ("Bucket", "Key", "Prefix", "StartAfter", "CopySource", "FunctionName")


class Context:
    """The attributes of a Lambda context the functions and Powertools read."""

    def __init__(self, name: str, memory: int, timeout_s: int) -> None:
        self.function_name = name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = "rehearsal"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def record_calls(path: str) -> None:
    """Append every botocore API call (service, operation, the params that name resources)."""
    import botocore.client

    lock = threading.Lock()
    original = botocore.client.BaseClient._make_api_call

    def recorded(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if _probe(params):
            return original(client, operation, params)
        kept: dict[str, Any] = {k: params[k] for k in KEPT_PARAMS if k in params}
        if operation == "DeleteObjects":
            kept["Keys"] = [o["Key"] for o in params["Delete"]["Objects"]]
        line = {"service": client.meta.service_model.service_name, "operation": operation}
        with lock, open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({**line, "params": kept}) + "\n")
        return original(client, operation, params)

    botocore.client.BaseClient._make_api_call = recorded  # type: ignore[method-assign]
    # The hot S3 calls of the clients s3queue makes skip `_make_api_call` (storage/lean.py):
    # record them where they are made, so that the policy check sees every call.
    from s3queue.storage import lean

    for method in ("get_object", "head_object", "put_object", "delete_object", "list_objects_v2"):
        operation = "".join(part.title() for part in method.split("_"))
        setattr(lean.LeanBucket, method, _recording(getattr(lean.LeanBucket, method), operation))

    def _write(line: dict[str, Any]) -> None:
        with lock, open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    lean_calls.append(_write)


lean_calls: list[Any] = []
"""Where `_recording` writes (set by `record_calls`)."""


def _probe(params: dict[str, Any]) -> bool:
    """A call prepared to learn the bucket's URL (`endpoints.learn`): never sent."""
    from s3queue.storage.endpoints import PROBE_KEY

    return PROBE_KEY in (params.get("Key"), params.get("Prefix"))


def _recording(call: Any, operation: str) -> Any:
    def recorded(self: Any, **params: Any) -> Any:
        kept = {k: params[k] for k in KEPT_PARAMS if k in params}
        if _probe(params):
            return call(self, **params)
        for write in lean_calls:
            write({"service": "s3", "operation": operation, "params": kept})
        return call(self, **params)

    return recorded


def module_origins() -> dict[str, str]:
    """Every loaded module outside the standard library: its file (``handlers.x`` included)."""
    found = {}
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        origin = getattr(module, "__file__", None)
        if origin and top not in sys.stdlib_module_names and top in (name, "handlers"):
            found[name] = origin
    return found


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.path[0:1] = [spec["task_root"], spec["layer_python"]]
    os.chdir(spec["task_root"])
    record_calls(os.environ.pop("REHEARSAL_CALLS"))
    import s3queue

    if not s3queue.__file__ or not s3queue.__file__.startswith(spec["layer_python"]):
        raise SystemExit(f"s3queue loaded from {s3queue.__file__}, not the layer asset")
    module_name, _, function_name = spec["handler"].rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    context = Context(spec["name"], spec["memory"], spec["timeout"])
    result = handler(json.loads(sys.stdin.read()), context)
    cronsim = sys.modules.get("cronsim")  # a layer dependency (contract/packaging.py)
    if cronsim is not None and not str(cronsim.__file__).startswith(spec["layer_python"]):
        raise SystemExit(f"cronsim loaded from {cronsim.__file__}, not the layer asset")
    sys.stdout.flush()
    print(MODULES + json.dumps(module_origins()), flush=True)
    print(RESULT + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()

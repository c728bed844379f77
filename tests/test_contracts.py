"""The contracts of the stack, the functions and the core: names, key segments, the queue map."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from s3queue.contract import names
from s3queue.contract.environment import COMPRESSED, PLAIN_LIMIT, Environment, QueueMap
from s3queue.contract.settings import QueueSettings
from s3queue.errors import ConfigError
from s3queue.protocol import keys

REPO = Path(__file__).resolve().parents[1]
CONTRACT_MODULES = ("s3queue.contract", "s3queue.errors")


def queue_map(count: int, name: str = "queue_{:03d}") -> QueueMap:
    queues = [name.format(i) for i in range(count)]
    return QueueMap(
        functions={q: names.worker_function_name("S3Queue", q) for q in queues},
        settings={
            q: QueueSettings(visibility_timeout=30 + i % 7, max_retries=i % 3, concurrency=4)
            for i, q in enumerate(queues)
        },
    )


def test_key_segments_are_the_ones_keys_builds() -> None:
    queue_keys = keys.QueueKeys("jobs/prod", "send_email")
    root = names.queue_root("jobs/prod", "send_email")
    assert queue_keys.root == root
    assert queue_keys.lease == root + names.LEASE
    assert (queue_keys.dlq, queue_keys.ids) == (root + names.DLQ, root + names.IDS)
    assert (queue_keys.inbox, queue_keys.msg) == (root + names.INBOX, root + names.MSG)
    assert queue_keys.tickets == root + names.TICKETS
    assert queue_keys.parts == root + names.PARTS
    assert keys.QUEUE_NAME is names.QUEUE_NAME  # one owner, no copy to keep equal


def test_idempotency_records_lie_outside_every_queue() -> None:
    # The stack grants and expires `_idempotency/<queue>/` by this name; the layer writes there.
    idempotency = pytest.importorskip("s3queue.idempotency")
    assert not names.QUEUE_NAME.match(names.IDEMPOTENCY.rstrip("/"))
    assert names.idempotency_root("jobs/prod") == "jobs/prod/_idempotency/"
    root = names.idempotency_root("jobs/prod", "send_email")
    assert root == idempotency.records_root("jobs/prod", "send_email")
    assert root == "jobs/prod/_idempotency/send_email/"
    assert not root.startswith(names.queue_root("jobs/prod", "send_email"))


def test_worker_names_fit_lambda_and_start_with_the_stack_head() -> None:
    assert names.worker_function_name("S3Queue", "send_email") == "S3Queue_send_email"
    stack = "A" + "b" * 39
    long_queues = ["q" * 64, "q" * 63 + "r"]
    made = [names.worker_function_name(stack, q) for q in long_queues]
    assert len(set(made)) == 2
    for name in made:
        assert len(name) <= names.FUNCTION_NAME_MAX
        assert name.startswith(names.worker_function_prefix(stack))


@pytest.mark.parametrize("count", [1, 2, 10, 100])
def test_queue_map_round_trips(count: int) -> None:
    original = queue_map(count)
    encoded = original.encode()
    assert QueueMap.decode(encoded) == original
    assert encoded.startswith(COMPRESSED) == (count == 100)


def test_a_small_map_stays_readable_json() -> None:
    encoded = queue_map(2).encode()
    assert len(encoded) <= PLAIN_LIMIT
    doc = json.loads(encoded)
    assert doc["head"] == "S3Queue_"
    assert doc["queues"] == {"queue_000": 0, "queue_001": 1}


def test_a_hundred_long_named_queues_fit_in_lambdas_4_kb() -> None:
    # 100 queues named like `orders_invoice_reminder_042`, settings varying per queue
    encoded = queue_map(100, name="orders_invoice_reminder_{:03d}").encode()
    assert len(encoded) < 2048, len(encoded)


def test_function_names_off_the_pattern_are_kept() -> None:
    odd = QueueMap(
        functions={"a": "S3Queue_a", "b": "other-function"},
        settings={"a": QueueSettings(), "b": QueueSettings(batch_size=3)},
    )
    assert QueueMap.decode(odd.encode()) == odd


def test_settings_delta_round_trips_the_derived_timeout() -> None:
    for settings in (
        QueueSettings(),
        QueueSettings(visibility_timeout=45.5),
        QueueSettings(visibility_timeout=90, timeout=90),
        QueueSettings(visibility_timeout=120, timeout=600, memory=1024),
    ):
        assert QueueSettings.from_mapping(settings.delta()) == settings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"send_email": {"function": "f"}}', "unknown version None"),
        ('{"v": 2, "head": "", "profiles": [], "queues": {"a": 0}}', "not a valid queue map"),
        ("zlib:not-base64!", "not a valid queue map"),
        ("[1", "not a valid queue map"),
    ],
)
def test_a_bad_queue_map_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Environment.from_env({"S3QUEUE_BUCKET": "b", "S3QUEUE_QUEUES": text})


def test_the_cdk_app_imports_only_the_contract_modules_of_the_core() -> None:
    imported: set[str] = set()
    for path in (REPO / "cdk").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "s3queue":
                imported |= {f"s3queue.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("s3queue."):
                imported.add(str(node.module))
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.split(".")[0] == "s3queue"}
    assert imported, "the cdk app reads the contracts from the core"
    outside = {m for m in imported if not m.startswith(CONTRACT_MODULES)}
    assert not outside, outside


def test_no_function_entry_point_imports_boto3() -> None:
    for path in (REPO / "functions").rglob("app.py"):
        tree = ast.parse(path.read_text())
        modules = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
        modules |= {
            (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
        }
        assert not modules & {"boto3", "botocore"}, path

"""`S3PersistenceLayer`: Powertools Idempotency records kept in the queue's bucket.

Use it as the ``persistence_store`` of Powertools' ``@idempotent`` / ``@idempotent_function``::

    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from s3queue.idempotency import S3PersistenceLayer

    store = S3PersistenceLayer.from_env()        # S3QUEUE_BUCKET, S3QUEUE_PREFIX, ...

    @idempotent_function(data_keyword_argument="order", persistence_store=store,
                         config=IdempotencyConfig(event_key_jmespath="id"))
    def charge(order: dict) -> dict: ...

One object per idempotency key, ``<records_prefix><function>/<hash>``. The records prefix is
``<prefix>/_idempotency/``, or ``<prefix>/_idempotency/<queue>/`` with a queue (as `from_env`
sets on a worker, so each worker can be granted its own queue's records only); a leading ``_``
is never a queue name, so no queue's objects, grants or admin calls cover it. The body is JSON:
status, expiration (s), in-progress expiration (ms), response data, payload hash, and a write
token that makes every ETag unique.

S3 requests per call (a 412 is billed as a PUT, a HEAD as a GET):

- first call: PUT If-None-Match (create, in progress) + PUT If-Match (completed) = 2 PUT;
- the function raises: PUT If-None-Match + DELETE If-Match;
- a repeat while completed or in progress: PUT (412) + HEAD (was the 412 our own lost write?)
  + GET (the record), then the stored result or ``IdempotencyAlreadyInProgressError``;
- a repeat after expiry: PUT (412) + HEAD + GET + PUT If-Match (replace) + PUT (completed).

This module imports Powertools, which ``import s3queue`` never does: it needs the ``lambda``
extra (``pip install 's3queue[lambda]'``), or the Powertools layer on Lambda.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from s3queue.common.clock import Clock, SystemClock
from s3queue.contract import names
from s3queue.contract.environment import Environment
from s3queue.contract.settings import DEFAULT_PREFIX
from s3queue.errors import Conflict, MalformedMessage
from s3queue.storage.base import Object, Storage, new_token

try:
    from aws_lambda_powertools.utilities.idempotency import BasePersistenceLayer
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
        STATUS_CONSTANTS,
        DataRecord,
    )
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "s3queue.idempotency needs Powertools for AWS Lambda: pip install 's3queue[lambda]' "
        "(on Lambda, add the Powertools layer)"
    ) from exc

log = logging.getLogger(__name__)

INPROGRESS = STATUS_CONSTANTS["INPROGRESS"]
PUT_ATTEMPTS = 3
"""Rounds of create / read / replace before giving up to the caller's `get_record`."""


class S3PersistenceLayer(BasePersistenceLayer):
    """Powertools' persistence contract on S3 conditional writes, through `Storage`.

    ``S3PersistenceLayer(bucket="b")`` makes its own boto3 client; pass ``s3=`` to share one,
    or ``storage=`` (e.g. ``MemoryStorage()``) to run without S3. ``records_prefix`` overrides
    the key prefix built from `prefix` and `queue`. ``in_progress_ttl`` (seconds)
    bounds an in-progress record when Powertools knows no Lambda remaining time (no
    ``register_lambda_context``, e.g. inside a queue handler); without it such a record blocks
    until it expires, as in Powertools' DynamoDB layer. `clock` must agree with the wall clock:
    Powertools reads ``datetime.now()`` itself.
    """

    def __init__(
        self,
        bucket: str | None = None,
        *,
        s3: Any = None,
        storage: Storage | None = None,
        prefix: str = DEFAULT_PREFIX,
        queue: str | None = None,
        records_prefix: str | None = None,
        in_progress_ttl: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if storage is None:
            if not bucket:
                raise ValueError("S3PersistenceLayer needs bucket= (or storage=)")
            from s3queue.storage.clients import make_client  # noqa: PLC0415 - boto3 on demand
            from s3queue.storage.s3 import S3Storage  # noqa: PLC0415 - boto3 on demand

            storage = S3Storage(s3 if s3 is not None else make_client(), bucket)
        self.storage = storage
        self.records_prefix = records_prefix or records_root(prefix, queue)
        self.in_progress_ttl = in_progress_ttl
        self.clock = clock or SystemClock()
        # The ETag of the record each thread wrote last, per key: its update and delete apply
        # only to that version, never to a record another execution took over since.
        self._owned = threading.local()
        super().__init__()  # type: ignore[no-untyped-call]  # Powertools leaves it untyped

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> S3PersistenceLayer:
        """The layer on the bucket, prefix, queue and endpoint in ``S3QUEUE_*`` (on a worker)."""
        from s3queue.storage.clients import make_client  # noqa: PLC0415 - boto3 on demand
        from s3queue.storage.s3 import S3Storage  # noqa: PLC0415 - boto3 on demand

        config = Environment.from_env(env)
        storage = S3Storage(make_client(config.endpoint_url), config.bucket)
        options.setdefault("prefix", config.prefix)
        options.setdefault("queue", config.queue)
        return cls(storage=storage, **options)

    def key_for(self, idempotency_key: str) -> str:
        """The object key of a record: ``<records_prefix><function, %-quoted>/<hash>``."""
        name, _, digest = idempotency_key.rpartition("#")
        if not name:
            return self.records_prefix + quote(idempotency_key, safe="")
        return f"{self.records_prefix}{quote(name, safe='')}/{quote(digest, safe='')}"

    def _get_expiry_timestamp(self) -> int:
        """Seconds since the epoch when a record written now expires (on the injected clock)."""
        return self.clock.now_ms() // 1000 + int(self.expires_after_seconds)

    def _get_record(self, idempotency_key: str) -> DataRecord:
        found = self.storage.get(self.key_for(idempotency_key))
        if found is None:
            raise IdempotencyItemNotFoundError
        return _to_data_record(_decode(found))

    def _put_record(self, data_record: DataRecord) -> None:
        """Create the record, or replace an expired one; else hand the caller the live one.

        |     LOCKED     |         RETRY if status = "INPROGRESS"                |     RETRY
        |----------------|-------------------------------------------------------|----------> time
        |           Lambda timeout                                          record expiry
        |       (in_progress_expiry)                                          (expiry)

            caller A                          S3                        caller B
            PUT If-None-Match: *   ->  created (e1)
                                              <-  PUT If-None-Match: *  412
                                              <-  GET: e1, INPROGRESS, live
                                                  -> IdempotencyAlreadyInProgressError
            (A crashes; e1's in-progress expiry passes)
                                              <-  PUT 412, GET: e1, expired
                                              <-  PUT If-Match: e1  -> e2 (B owns it)
        Two callers that read the same expired e1 both PUT If-Match e1: exactly one wins, the
        other reads again and finds the winner's live record.
        """
        key = self.key_for(data_record.idempotency_key)
        if data_record.in_progress_expiry_timestamp is None and self.in_progress_ttl is not None:
            ttl_ms = round(self.in_progress_ttl * 1000)
            data_record.in_progress_expiry_timestamp = self.clock.now_ms() + ttl_ms
        for _ in range(PUT_ATTEMPTS):
            etag = self._write(key, data_record, if_none_match=True)
            if etag is not None:
                self._owned_etags()[key] = etag
                return
            current = self.storage.get(key)
            if current is None:
                continue  # deleted between our PUT and GET (the owner failed): create again
            fields = _decode(current)
            if not self._replaceable(fields):
                old = _to_data_record(fields)
                self._validate_payload(data_payload=data_record, stored_data_record=old)
                self._save_to_cache(data_record=old)
                raise IdempotencyItemAlreadyExistsError(old_data_record=old)
            etag = self._write(key, data_record, if_match=current.etag)
            if etag is not None:
                self._owned_etags()[key] = etag
                log.info("idempotency record %s expired (%s): replaced", key, fields["status"])
                return
            log.debug("idempotency record %s: another caller replaced it first", key)
        raise IdempotencyItemAlreadyExistsError

    def _replaceable(self, fields: dict[str, Any]) -> bool:
        """Expired, or in progress past its in-progress expiry (the owner died)."""
        now_ms = self.clock.now_ms()
        if int(fields["expiration"]) < now_ms // 1000:
            return True
        in_progress_until = fields.get("in_progress_expiration")
        return (
            fields["status"] == INPROGRESS
            and in_progress_until is not None
            and int(in_progress_until) < now_ms
        )

    def _update_record(self, data_record: DataRecord) -> None:
        """Store the result, over our own in-progress version only."""
        key = self.key_for(data_record.idempotency_key)
        if self._write(key, data_record, if_match=self._owned_etag(key)) is None:
            log.debug("idempotency record %s was taken over: result not stored", key)

    def _delete_record(self, data_record: DataRecord) -> None:
        """Remove our own in-progress version; a record taken over since is not ours."""
        key = self.key_for(data_record.idempotency_key)
        try:
            self.storage.delete(key, if_match=self._owned_etag(key))
        except Conflict:
            log.debug("idempotency record %s was taken over: left in place", key)

    def _write(
        self,
        key: str,
        record: DataRecord,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str | None:
        """One conditional PUT of `record`: its ETag, or None if its condition failed."""
        token = new_token()
        try:
            etag = self.storage.put(
                key,
                _encode(record, token, self.payload_validation_enabled),
                if_none_match=if_none_match,
                if_match=if_match,
                token=token,
            )
        except Conflict:
            return None
        return etag

    def _owned_etags(self) -> dict[str, str]:
        etags: dict[str, str] | None = getattr(self._owned, "etags", None)
        if etags is None:
            etags = self._owned.etags = {}
        return etags

    def _owned_etag(self, key: str) -> str | None:
        """The ETag this thread last wrote at `key` (forgotten now); None: unconditional."""
        return self._owned_etags().pop(key, None)


__all__ = ["S3PersistenceLayer", "records_root"]


def records_root(prefix: str = DEFAULT_PREFIX, queue: str | None = None) -> str:
    """Where records live: ``<prefix>/_idempotency/``, and ``<queue>/`` below it for a queue."""
    return names.idempotency_root(prefix, queue)


def _encode(record: DataRecord, token: str, with_validation: bool) -> bytes:
    fields: dict[str, Any] = {
        "idempotency_key": record.idempotency_key,
        "status": record._status,  # the stored status, not the clock-derived EXPIRED
        "expiration": record.expiry_timestamp,
        "token": token,
    }
    if record._status == INPROGRESS and record.in_progress_expiry_timestamp is not None:
        fields["in_progress_expiration"] = record.in_progress_expiry_timestamp
    if record.response_data:
        fields["data"] = record.response_data
    if with_validation and record.payload_hash:
        fields["validation"] = record.payload_hash
    return json.dumps(fields, sort_keys=True).encode()


def _decode(found: Object) -> dict[str, Any]:
    """The fields of a stored record; `MalformedMessage` for anything this layer did not write."""
    try:
        fields = json.loads(found.body)
        if not isinstance(fields, dict):
            raise TypeError(f"a JSON {type(fields).__name__}")
        missing = {"idempotency_key", "status", "expiration"} - fields.keys()
        if missing:
            raise KeyError(sorted(missing))
        int(fields["expiration"])
    except (ValueError, TypeError, KeyError) as exc:
        raise MalformedMessage(f"{found.key} is not an idempotency record: {exc!r}") from exc
    return fields


def _to_data_record(fields: dict[str, Any]) -> DataRecord:
    return DataRecord(
        idempotency_key=fields["idempotency_key"],
        status=fields["status"],
        expiry_timestamp=int(fields["expiration"]),
        in_progress_expiry_timestamp=fields.get("in_progress_expiration"),
        response_data=fields.get("data", ""),
        payload_hash=fields.get("validation", ""),
    )

"""The boto3 clients the library makes: S3 (tuned for many small requests from many threads)
and Lambda (the coordinator's asynchronous invokes)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import boto3
import botocore.session
from botocore.config import Config
from botocore.credentials import Credentials

from s3queue.contract.environment import ENV_ENDPOINT_URL
from s3queue.storage.lean import Settings, bucket_path, register
from s3queue.storage.parsing import (
    BOTOCORE_CHECK_200,
    LeanParserFactory,
    check_200,
    lean_parsing_supported,
    parse_time,
)
from s3queue.storage.responses import is_throttling

if TYPE_CHECKING:
    from s3queue.producing.pacing import Pacer


def make_client(
    endpoint_url: str | None = None,
    region: str | None = None,
    *,
    credentials: tuple[str, str] | None = None,
    sdk_retries: int = 5,
    max_pool_connections: int = 64,
    retry_mode: Literal["standard", "adaptive"] = "standard",
    connect_timeout: float = 5.0,
    read_timeout: float = 20.0,
    environ: Mapping[str, str] | None = None,
    lean: bool = True,
) -> Any:
    """A boto3 S3 client tuned for many small requests from many threads.

    The endpoint is `endpoint_url`, else ``S3QUEUE_ENDPOINT_URL`` in `environ` (default
    ``os.environ``), else boto3's own choice (AWS): the one rule of the library and the CLI. Like
    boto3 reading its ``AWS_*`` variables, this client factory is where the environment enters.
    With an endpoint URL (SeaweedFS, moto, ...) addressing is path-style and the region defaults
    to us-east-1. Checksums are computed only where S3 requires them (DeleteObjects): the bodies
    are small, TLS already protects them, and CRC32 on every call costs client CPU, the
    bottleneck here. `max_pool_connections` is how many requests may be in flight at once
    without a new connection (and TLS handshake) each: size it to the threads that share it.
    ``retry_mode="adaptive"`` adds botocore's client-side rate limiter; `Queue`'s own client
    uses `pace` instead (why: `s3queue.producing.pacing`).

    Three of botocore's steps are done more cheaply, with the same outcome (client CPU per
    S3 call): timestamps (`parse_time`), its search for an error in a 200 (`check_200`), and
    its walk of an answer's headers and XML (`LeanXMLParser`). In the standard retry mode,
    `S3Storage` sends its hot calls (GET, HEAD, PUT, DELETE of one key) by the lean path of
    `s3queue.storage.lean` unless `lean` is False: path-style with an endpoint URL; on AWS's
    own endpoints, for each bucket whose calls botocore prepares as that path would
    (`s3queue.storage.endpoints`).
    """
    if endpoint_url is None:
        endpoint_url = (os.environ if environ is None else environ).get(ENV_ENDPOINT_URL) or None
    config = Config(
        # botocore's max_attempts counts retries after the first attempt (total_max_attempts
        # would count them all).
        retries={"mode": retry_mode, "max_attempts": sdk_retries},
        max_pool_connections=max_pool_connections,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    keys: dict[str, str] = {}
    if credentials is not None:
        keys = {"aws_access_key_id": credentials[0], "aws_secret_access_key": credentials[1]}
    # A session per client: creating clients from boto3's default session is not thread-safe.
    core = botocore.session.get_session()
    if lean_parsing_supported():
        parsers = LeanParserFactory()
        parsers.set_parser_defaults(timestamp_parser=parse_time)
        core.register_component("response_parser_factory", parsers)
    session = boto3.session.Session(botocore_session=core)
    client = session.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region or ("us-east-1" if endpoint_url else None),
        config=config,
        **keys,
    )
    if BOTOCORE_CHECK_200 is not None:
        client.meta.events.unregister("before-parse.s3.*", BOTOCORE_CHECK_200)
        client.meta.events.register_first(
            "before-parse.s3.*", check_200, unique_id="s3queue-check-200"
        )
    if lean and retry_mode == "standard":
        signing = Credentials(*credentials) if credentials is not None else core.get_credentials()
        if signing is not None:
            settings = Settings(signing, endpoint_url, client.meta.region_name, sdk_retries + 1)
            register(client, settings)
    return client


_SENT = "s3queue_paced_at"
"""Where `pace` keeps an attempt's send time: botocore's request context, one per call."""


def pace(client: Any, pacer: Pacer) -> Pacer:
    """Send every attempt of `client` (a first try or botocore's retry) through `pacer`, and
    tell it each answer, so that once S3 throttles, all the threads sharing `client` slow down
    together (`s3queue.producing.pacing`); `pacer`. An attempt whose slot is too far away
    raises `Throttled` before anything is sent (botocore does not retry it).

    The answers come from botocore's ``needs-retry`` event, which the lean path of
    `s3queue.storage.lean` does not emit: a client `make_client` built lean (an endpoint URL)
    is refused here; build it with ``lean=False`` (as `Queue` does for its own client).
    """
    if bucket_path(client, "b") is not None:
        raise ValueError("pace() needs botocore's path: make_client(..., lean=False)")

    def before_send(request: Any = None, **_: Any) -> None:
        sent = pacer.before_send()
        context = getattr(request, "context", None)
        if isinstance(context, dict):
            context[_SENT] = sent

    def needs_retry(
        response: Any = None, request_dict: dict[str, Any] | None = None, **_: Any
    ) -> None:
        sent = ((request_dict or {}).get("context") or {}).get(_SENT)
        if response is None or sent is None:  # no answer: a lost connection, or not sent
            return
        http, parsed = response
        code = str((parsed or {}).get("Error", {}).get("Code", ""))
        status = int(http.status_code)
        # S3's 503 is "Slow Down" (a HEAD's has no body, so no code to say so)
        pacer.answered(sent, throttled=is_throttling(code, status) or status == 503)

    client.meta.events.register("before-send.s3", before_send)
    client.meta.events.register("needs-retry.s3", needs_retry)
    return pacer


def make_lambda_client(
    region: str | None = None, *, connect_timeout: float = 2.0, read_timeout: float = 10.0
) -> Any:
    """A boto3 Lambda client for the coordinator's asynchronous invokes (lives here with boto3).

    Its endpoint is the SDK's (``AWS_ENDPOINT_URL_LAMBDA`` redirects it, as the deployment
    rehearsal does); an ``Event`` invoke is retried three times at most, then the coordinator
    invokes the ticket again after ``dispatch_timeout``.
    """
    config = Config(
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )
    return boto3.session.Session().client("lambda", region_name=region, config=config)


def pool_size(client: Any) -> int | None:
    """How many connections a boto3 client keeps for concurrent requests (None: unknown)."""
    size = getattr(
        getattr(getattr(client, "meta", None), "config", None), "max_pool_connections", None
    )
    return size if isinstance(size, int) else None

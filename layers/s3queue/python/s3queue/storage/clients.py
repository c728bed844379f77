"""The boto3 clients the library makes: S3 (tuned for many small requests from many threads)
and Lambda (the coordinator's asynchronous invokes)."""

from __future__ import annotations

import inspect
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import boto3
import botocore.session
from botocore import handlers
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.parsers import ResponseParserFactory, RestXMLParser
from botocore.utils import parse_timestamp

from s3queue.contract.environment import ENV_ENDPOINT_URL
from s3queue.storage.lean import Settings, bucket_path, register
from s3queue.storage.responses import is_throttling, plainly_complete, timestamp

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
    if _BOTOCORE_CHECK_200 is not None:
        client.meta.events.unregister("before-parse.s3.*", _BOTOCORE_CHECK_200)
        client.meta.events.register_first(
            "before-parse.s3.*", check_200, unique_id="s3queue-check-200"
        )
    if lean and retry_mode == "standard":
        signing = Credentials(*credentials) if credentials is not None else core.get_credentials()
        if signing is not None:
            settings = Settings(signing, endpoint_url, client.meta.region_name, sdk_retries + 1)
            register(client, settings)
    return client


_BOTOCORE_CHECK_200 = getattr(handlers, "_handle_200_error", None)
"""botocore's check for an error in a 200 (a private name: left in place if it ever goes)."""


def parse_time(value: Any) -> datetime:
    """botocore's timestamp parser, by the standard library for S3's own two forms."""
    if isinstance(value, str):
        moment = timestamp(value)
        if moment is not None:
            return moment
    parsed: datetime = parse_timestamp(value)
    return parsed


def check_200(response_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
    """botocore's ``_handle_200_error`` (an error in a 200's body, or a truncated body, turns
    it into a 500 to retry), skipped for a body that is plainly whole and no error."""
    if response_dict and response_dict.get("status_code") == 200:
        body = response_dict.get("body")
        if isinstance(body, bytes) and plainly_complete(body):
            return
    if _BOTOCORE_CHECK_200 is not None:
        _BOTOCORE_CHECK_200(response_dict=response_dict, **kwargs)


_RELIED_ON = {
    RestXMLParser: (
        "_parse_non_payload_attrs",
        "_handle_structure",
        "_build_name_to_xml_node",
        "_member_key_name",
        "_namespace_re",
        "_parse_shape",
        "_parse_header_map",
    ),
    ResponseParserFactory: ("set_parser_defaults", "create_parser"),
}
"""botocore's private names `LeanXMLParser` and `LeanParserFactory` override or call."""


def lean_parsing_supported() -> bool:
    """Whether this botocore still has every private name the lean parser relies on, with
    the signature it overrides. False (a botocore that renamed one) leaves botocore's own
    parser in place: slower, never wrong; `tests/test_client_parsing.py` fails loudly then."""
    try:
        made = {RestXMLParser: RestXMLParser(), ResponseParserFactory: ResponseParserFactory()}
    except TypeError:
        return False
    if not all(hasattr(made[cls], name) for cls, names in _RELIED_ON.items() for name in names):
        return False
    if not isinstance(getattr(made[ResponseParserFactory], "_defaults", None), dict):
        return False
    wanted = ["self", "response", "shape", "member_shapes", "final_parsed"]
    return list(inspect.signature(RestXMLParser._parse_non_payload_attrs).parameters) == wanted


class LeanParserFactory(ResponseParserFactory):  # type: ignore[misc]
    """botocore's parser factory, with `LeanXMLParser` for S3's protocol (rest-xml).

    botocore asks it for a parser per answer; the shapes' plans live here, one set per
    client (a client's shapes live as long as it does), not in a class-wide cache that would
    grow with every client made."""

    def __init__(self) -> None:
        super().__init__()
        self._headers: dict[int, tuple[Any, HeaderPlan]] = {}
        self._structures: dict[int, tuple[Any, BodyPlan | None]] = {}
        self._names: dict[str, str] = {}

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "rest-xml":
            parser = LeanXMLParser(**self._defaults)
            parser._plans, parser._bodies = self._headers, self._structures
            parser._tags = self._names
            return parser
        return super().create_parser(protocol_name)


HeaderPlan = tuple[tuple[str, Any, str, str], ...]
BodyPlan = tuple[tuple[str, Any, str, str], ...]
_SCALARS = {"string": "s", "integer": "i", "long": "i", "boolean": "b", "timestamp": "t"}


class LeanXMLParser(RestXMLParser):  # type: ignore[misc]
    """botocore's rest-xml parser, with each shape's members planned once, not per answer.

    Headers: botocore asks its case-insensitive `HeadersDict` once for each header the
    output shape may carry (GetObject: about 50); here the few headers an answer has are
    lower-cased once. XML: botocore works out each member's XML name and parser again for
    every element (a LIST of 1,000 keys has 1,000 ``Contents``); here a structure's plan
    lists them, and scalars are read in place. Shapes with anything unusual (an exception,
    a tagged union, an XML attribute) and repeated elements go botocore's way.
    """

    _plans: dict[int, tuple[Any, HeaderPlan]] = {}  # noqa: RUF012 (the factory's, per client)
    _bodies: dict[int, tuple[Any, BodyPlan | None]] = {}  # noqa: RUF012
    _tags: dict[str, str] = {}  # noqa: RUF012

    def _parse_non_payload_attrs(
        self, response: dict[str, Any], shape: Any, member_shapes: Any, final_parsed: Any
    ) -> None:
        headers = response["headers"]
        lowered = {str(name).lower(): value for name, value in headers.items()}
        for name, member, location, header in self._header_plan(member_shapes):
            if location == "header":
                if header in lowered:
                    final_parsed[name] = self._parse_shape(member, lowered[header])
            elif location == "headers":
                final_parsed[name] = self._parse_header_map(member, headers)
            else:  # statusCode
                final_parsed[name] = self._parse_shape(member, response["status_code"])

    def _header_plan(self, member_shapes: Any) -> HeaderPlan:
        """The members that S3 sends outside the body: name, shape, location, header name."""
        known = self._plans.get(id(member_shapes))
        if known is not None and known[0] is member_shapes:
            return known[1]
        plan = tuple(
            (name, member, location, str(member.serialization.get("name", name)).lower())
            for name, member in member_shapes.items()
            if (location := member.serialization.get("location"))
            in ("header", "headers", "statusCode")
        )
        self._plans[id(member_shapes)] = (member_shapes, plan)
        return plan

    def _node_tag(self, node: Any) -> str:
        tag: str = node.tag
        name = self._tags.get(tag)
        if name is None:
            name = self._tags[tag] = self._namespace_re.sub("", tag)
        return name

    def _handle_structure(self, shape: Any, node: Any) -> Any:
        plan = self._body_plan(shape)
        if plan is None or not isinstance(node, ET.Element):
            return super()._handle_structure(shape, node)
        found = self._build_name_to_xml_node(node)
        parsed: dict[str, Any] = {}
        for name, member, xml_name, kind in plan:
            child = found.get(xml_name)
            if child is None:
                continue
            if not kind or not isinstance(child, ET.Element):
                parsed[name] = self._parse_shape(member, child)
                continue
            text = child.text or ""
            if kind == "s":
                parsed[name] = text
            elif kind == "i":
                parsed[name] = int(text)
            elif kind == "b":
                parsed[name] = text == "true"
            else:
                parsed[name] = self._timestamp_parser(text)
        return parsed

    def _body_plan(self, shape: Any) -> BodyPlan | None:
        """The members of `shape` in the XML body: name, shape, XML name, scalar kind."""
        known = self._bodies.get(id(shape))
        if known is not None and known[0] is shape:
            return known[1]
        plan: BodyPlan | None = ()
        if shape.metadata.get("exception", False) or shape.is_tagged_union:
            plan = None
        for name, member in shape.members.items():
            where = member.serialization
            if plan is None or where.get("xmlAttribute") or where.get("jsonvalue"):
                plan = None
            elif not self._elsewhere(where):
                kind = _SCALARS.get(member.type_name, "")
                plan += ((name, member, self._member_key_name(member, name), kind),)
        self._bodies[id(shape)] = (shape, plan)
        return plan

    def _elsewhere(self, where: dict[str, Any]) -> bool:
        """A member botocore reads outside the XML body (headers, status), as its version
        decides: botocore 1.36 skips any location, later ones those in `KNOWN_LOCATIONS`."""
        known = getattr(self, "KNOWN_LOCATIONS", None)
        location = where.get("location") in known if known is not None else "location" in where
        return bool(location or where.get("eventheader"))


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

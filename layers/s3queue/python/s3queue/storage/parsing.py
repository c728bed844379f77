"""The cheaper response path of the S3 clients `make_client` builds (issue 22 item 5): S3's
timestamps by the standard library, botocore's check for an error in a 200 without a second
XML parse, and a rest-xml parser with each shape's members planned once (`LeanXMLParser`).
Each overrides or calls a private name of botocore: `lean_parsing_supported` checks them all,
and botocore's own parser stays in place where one is missing (`tests/test_client_parsing.py`).
"""

from __future__ import annotations

import inspect
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any

from botocore import handlers
from botocore.parsers import ResponseParserFactory, RestXMLParser
from botocore.utils import parse_timestamp

from s3queue.storage.responses import plainly_complete, timestamp

BOTOCORE_CHECK_200 = getattr(handlers, "_handle_200_error", None)
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
    if BOTOCORE_CHECK_200 is not None:
        BOTOCORE_CHECK_200(response_dict=response_dict, **kwargs)


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

"""A ListObjectsV2 answer read straight from its XML: the lean path's LIST (`lean.py`).

botocore reads a LIST by walking its output model over every element (with `parsing.py`'s
planned shapes: 9.5-10.8 ms of CPU for a page of 1,000 keys on this machine, 5.9-6.5 this
way; docs/performance.md, session 20). The fields `S3Storage` reads are few:
each object's key, ETag, size and time, the folders, whether more follow and the token for
them. This reads just those, by ElementTree, into the dict botocore would give for them
(keys decoded as botocore decodes them when it asked for ``encoding-type=url``).
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import unquote_plus

from botocore.exceptions import ClientError

from s3queue.storage.parsing import parse_time
from s3queue.storage.signing import canonical_query

_QUERY = {
    "Prefix": "prefix",
    "MaxKeys": "max-keys",
    "StartAfter": "start-after",
    "Delimiter": "delimiter",
    "ContinuationToken": "continuation-token",
}
"""`list_objects_v2`'s parameters, as S3 names them in the query."""


class Truncated(ValueError):
    """The body is not a whole ListObjectsV2 answer (a cut connection): retry the call."""


def list_query(params: dict[str, Any]) -> str:
    """The canonical query string of a ListObjectsV2 call with boto3's `params`, keys asked
    for URL-encoded (as botocore asks)."""
    query = {"list-type": "2", "encoding-type": "url"}
    query.update({_QUERY[name]: str(value) for name, value in params.items()})
    return canonical_query(query)


def listed(content: bytes, parsed: dict[str, Any]) -> dict[str, Any]:
    """`parsed` (a 2xx's headers, `lean.answer`) with the body's fields (`list_answer`); a body
    that is not a whole answer raises a 500, which `S3Storage` retries."""
    try:
        parsed.update(list_answer(content))
    except Truncated as exc:
        meta = {**parsed["ResponseMetadata"], "HTTPStatusCode": 500}
        error = {"Code": "InternalError", "Message": str(exc)}
        raise ClientError({"Error": error, "ResponseMetadata": meta}, "ListObjectsV2") from exc
    return parsed


def list_answer(content: bytes) -> dict[str, Any]:
    """The ``Contents``, ``CommonPrefixes``, ``IsTruncated``, ``NextContinuationToken`` and
    ``KeyCount`` of a ListObjectsV2 body, as botocore gives them."""
    try:
        root = ET.fromstring(content)
    except ET.ParseError as exc:
        raise Truncated(f"unreadable ListObjectsV2 answer: {exc}") from exc
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag != f"{ns}ListBucketResult":
        raise Truncated(f"not a ListObjectsV2 answer: <{root.tag}>")
    try:
        return _read(root, ns)
    except (KeyError, ValueError) as exc:
        raise Truncated(f"incomplete ListObjectsV2 answer: {exc!r}") from exc


def _read(root: ET.Element, ns: str) -> dict[str, Any]:
    fields: dict[str, str] = {}
    contents: list[dict[str, Any]] = []
    prefixes: list[str] = []
    cut = len(ns)
    for child in root:
        tag = child.tag[cut:]
        if tag == "Contents":
            item = {sub.tag[cut:]: sub.text or "" for sub in child}
            contents.append(
                {
                    "Key": item["Key"],
                    "ETag": item.get("ETag", ""),
                    "Size": int(item.get("Size", 0)),
                    "LastModified": _time(item["LastModified"]),
                }
            )
        elif tag == "CommonPrefixes":
            prefixes.extend(sub.text or "" for sub in child if sub.tag[cut:] == "Prefix")
        else:
            fields[tag] = child.text or ""
    if fields.get("EncodingType") == "url":
        for entry in contents:
            entry["Key"] = _decoded(entry["Key"])
        prefixes = [_decoded(prefix) for prefix in prefixes]
    parsed: dict[str, Any] = {"IsTruncated": fields.get("IsTruncated") == "true"}
    if contents:
        parsed["Contents"] = contents
    if prefixes:
        parsed["CommonPrefixes"] = [{"Prefix": prefix} for prefix in prefixes]
    if "NextContinuationToken" in fields:
        parsed["NextContinuationToken"] = fields["NextContinuationToken"]
    if "KeyCount" in fields:
        parsed["KeyCount"] = int(fields["KeyCount"])
    return parsed


def _decoded(text: str) -> str:
    """A name S3 URL-encoded (``encoding-type=url``), as botocore decodes it."""
    return unquote_plus(text) if "%" in text or "+" in text else text


_time = functools.lru_cache(maxsize=1024)(parse_time)
"""An object's time in a LIST, by its text: S3 gives whole seconds, so a page of keys written
together shares a few."""

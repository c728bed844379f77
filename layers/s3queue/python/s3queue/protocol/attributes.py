"""Message attributes: string metadata beside the body (``message.attributes``).

Library messages keep their attributes in the record; a plain PUT into ``inbox/`` carries them
as S3 user metadata (``x-amz-meta-<name>``), which S3 lowercases and limits to 2 KiB in all. One
set of rules covers both, so an attribute set the library accepts is also one a raw PUT could
carry, and a handler sees the same names either way:

- names: 1-128 of ``[a-z0-9_.-]``, starting with a letter or digit, not starting with ``s3q-``
  (reserved for S3Queue's own metadata, e.g. each write's token);
- values: strings;
- in all, names plus values up to `MAX_BYTES` (2 KiB) of UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from s3queue.errors import InvalidArgument

MAX_BYTES = 2048
"""Names plus values, UTF-8: S3's limit on an object's user metadata."""
RESERVED = "s3q-"
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,127}")

Attributes = dict[str, str]


def check_attributes(attributes: Mapping[str, str] | None) -> Attributes:
    """A copy of `attributes` (empty for None); `InvalidArgument` naming the first bad one."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise InvalidArgument(
            f"attributes must be a mapping of str to str, got {type(attributes).__name__}"
        )
    checked: Attributes = {}
    size = 0
    for name, value in attributes.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise InvalidArgument(
                f"invalid attribute name {name!r}: use 1-128 of [a-z0-9_.-], starting with a "
                "letter or digit (S3 metadata names are lowercase)"
            )
        if name.startswith(RESERVED):
            raise InvalidArgument(f"attribute name {name!r}: the prefix {RESERVED!r} is reserved")
        if not isinstance(value, str):
            raise InvalidArgument(
                f"attribute {name!r} must be a str, got {type(value).__name__}: {value!r}"
            )
        size += len(name.encode()) + len(value.encode())
        checked[name] = value
    if size > MAX_BYTES:
        raise InvalidArgument(
            f"attributes take {size} bytes (names plus values, UTF-8); at most {MAX_BYTES}"
        )
    return checked


def from_metadata(metadata: Mapping[str, str]) -> Attributes:
    """The attributes of an object another service put: its user metadata, without ours."""
    return {
        name.lower(): value
        for name, value in metadata.items()
        if not name.lower().startswith(RESERVED)
    }

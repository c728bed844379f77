"""What S3Storage sends, beyond the call itself: pure helpers, no boto3.

- `no_blind_resend`: botocore's retry hook that keeps the SDK from resending one of our creates
  (`S3Storage.put` checks by HEAD first, see s3.py);
- `just_below` and `not_after`: a ``StartAfter`` that lists the same keys on AWS and on servers
  that walk keys as folders (SeaweedFS);
- `delete_entry`: one key of a DeleteObjects request.
"""

from __future__ import annotations

from typing import Any

TOKEN_METADATA = "s3q-token"
"""The user-metadata key that carries each write's token (``x-amz-meta-s3q-token``)."""


def no_blind_resend(request_dict: dict[str, Any] | None = None, **_: Any) -> bool | None:
    """botocore's retry hook: False (never resend) for our creates, which `put` retries itself
    once it has checked that the first attempt did not apply; None (no opinion) otherwise."""
    headers = (request_dict or {}).get("headers", {})
    if headers.get("If-None-Match") == "*" and f"x-amz-meta-{TOKEN_METADATA}" in headers:
        return False
    return None


def just_below(start_after: str) -> str:
    """A StartAfter that lists what `start_after` does on AWS, plus that key, on any server.

    SeaweedFS walks keys as a folder tree: ``StartAfter="q/inbox"`` skips the whole folder
    ``q/inbox/`` there, where AWS compares strings and lists ``q/inbox/a.json`` (it sorts after
    ``q/inbox``). So the last character steps down by one and the highest code point follows
    (``q/inbow`` + U+10FFFF): that sorts just before ``q/inbox`` on every server, names no
    folder, and only ``start_after`` itself (or keys beginning with the odd value sent) can lie
    between them, which `S3Storage.list` drops. A value ending in ``/`` is a folder's inside,
    which every server lists: it is sent as it is.
    """
    last = ord(start_after[-1])
    if start_after.endswith("/") or last == 0:
        return start_after
    step = 0xD7FF if last == 0xE000 else last - 1  # never a surrogate
    return start_after[:-1] + chr(step) + _HIGHEST


_HIGHEST = "\U0010ffff"


def not_after(key: str, start_after: str, sent: str) -> bool:
    """A key listed from `sent` that the caller's `start_after` excludes: that key itself, or
    one beginning with `sent` (between the two on AWS). Any other key is the server's own
    next one, even where a folder-walking server orders it unlike AWS (``a/x``, ``a-b``)."""
    return key == start_after or key.startswith(sent)


def delete_entry(key: str, etag: str | None) -> dict[str, str]:
    """One key of a DeleteObjects request, conditional on its ETag when one is given."""
    return {"Key": key} if etag is None else {"Key": key, "ETag": f'"{etag}"'}

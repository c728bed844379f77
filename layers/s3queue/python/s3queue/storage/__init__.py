"""The storage primitives the queue is built on, and their backends.

Every queue operation is made of five calls, each atomic on one key:

- ``get(key)``: the object, or ``None`` when it does not exist.
- ``put(key, body, if_none_match=True)``: create; ``Conflict`` if the key exists.
- ``put(key, body, if_match=etag)``: compare-and-swap; ``Conflict`` if the object changed or
  is gone.
- ``delete(key, if_match=etag)``: conditional delete; a missing key is not an error (deletes are
  idempotent), a changed one is ``Conflict``.
- ``list(prefix, start_after=...)``: one page of keys in lexicographic order, strongly
  consistent with every write that returned before it started.

``delete_many`` removes up to 1,000 keys in one request (missing keys are fine).

Every write carries a token, stored with the object. A write whose response was lost comes back
as ``Conflict`` when the SDK retries it (the first attempt already applied); ``put`` then reads
the token back and, when it is the caller's own, returns the ETag instead of raising.
"""

from s3queue.storage.base import Entry, Head, Object, Page, Storage, new_token
from s3queue.storage.memory import MemoryStorage

__all__ = ["Entry", "Head", "MemoryStorage", "Object", "Page", "Storage", "new_token"]

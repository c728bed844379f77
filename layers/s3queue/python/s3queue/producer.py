"""Moved: `s3queue.producing.producer` (``from s3queue import Queue`` is the public path).

Kept for one release so that code written against the old path keeps working; it warns once.
"""

import warnings

from s3queue.producing.arguments import MAX_DELAY
from s3queue.producing.producer import Queue

warnings.warn(
    "s3queue.producer moved to s3queue.producing.producer (use `from s3queue import Queue`); "
    "the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["MAX_DELAY", "Queue"]

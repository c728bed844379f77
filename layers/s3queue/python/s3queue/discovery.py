"""Handler discovery moved to `s3queue.config` (the stack imports only the contract modules).

Kept so that ``from s3queue.discovery import discover_handlers`` goes on working.
"""

from s3queue.config import HANDLER_NAME, SETTINGS_NAME, HandlerSpec, discover_handlers, read_handler

__all__ = ["HANDLER_NAME", "SETTINGS_NAME", "HandlerSpec", "discover_handlers", "read_handler"]

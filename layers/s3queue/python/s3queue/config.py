"""Moved: `s3queue.contract.settings`, `s3queue.contract.environment`, `s3queue.contract.discovery`.

Kept for one release so that code written against the old path keeps working; it warns once.
"""

import warnings

from s3queue.contract.discovery import (
    HANDLER_NAME,
    SETTINGS_NAME,
    HandlerSpec,
    discover_handlers,
    read_handler,
)
from s3queue.contract.environment import (
    ENV_BUCKET,
    ENV_ENDPOINT_URL,
    ENV_PREFIX,
    ENV_QUEUE,
    ENV_QUEUES,
    ENV_SETTINGS,
    Environment,
    QueueMap,
)
from s3queue.contract.settings import DEFAULT_PREFIX, CoordinatorSettings, QueueSettings
from s3queue.errors import ConfigError

warnings.warn(
    "s3queue.config moved to s3queue.contract (settings, environment, discovery); "
    "the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DEFAULT_PREFIX",
    "ENV_BUCKET",
    "ENV_ENDPOINT_URL",
    "ENV_PREFIX",
    "ENV_QUEUE",
    "ENV_QUEUES",
    "ENV_SETTINGS",
    "HANDLER_NAME",
    "SETTINGS_NAME",
    "ConfigError",
    "CoordinatorSettings",
    "Environment",
    "HandlerSpec",
    "QueueMap",
    "QueueSettings",
    "discover_handlers",
    "read_handler",
]

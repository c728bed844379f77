"""Queue ``send_email``: render an e-mail from a template and send it.

Body: ``{"to": "ada@example.com", "template": "welcome", "name": "Ada"}``; every other field is
available to the template too. An invalid address, an unknown template or a missing field is a
`PermanentError` (straight to the DLQ: retrying cannot fix the message). "Sending" writes the
rendered message to the directory named by ``S3QUEUE_OUTBOX``, or logs it when that is unset,
so the example runs offline.
"""

from __future__ import annotations

import logging
import os
import re
from email.message import EmailMessage
from pathlib import Path
from string import Template
from typing import Any

from s3queue import Message, PermanentError

SETTINGS = {
    "visibility_timeout": 30,
    "max_retries": 5,
    "batch_size": 20,
    "concurrency": 4,
    "memory": 256,
    "timeout": 60,
}

OUTBOX_ENV = "S3QUEUE_OUTBOX"
SENDER = "S3Queue <no-reply@example.com>"
TEMPLATES = {
    "welcome": (
        Template("Welcome, $name"),
        Template("Hello $name,\n\nyour account is ready. Sign in at $url.\n"),
    ),
    "password_reset": (
        Template("Reset your password"),
        Template("Hello $name,\n\nfollow $url within the hour to choose a new password.\n"),
    ),
}
DEFAULTS = {"url": "https://example.com"}
ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")

logger = logging.getLogger(__name__)


def handle(message: Message) -> None:
    """Render the message's e-mail and deliver it to the outbox."""
    email = render(message.body)
    # One file per idempotency key: a redelivered message overwrites its own e-mail.
    deliver(email, name=message.idempotency_key.replace(":", "_"))


def render(body: Any) -> EmailMessage:
    """The e-mail a message body asks for; `PermanentError` when the body cannot make one."""
    if not isinstance(body, dict):
        raise PermanentError(f"body must be a JSON object, got {type(body).__name__}")
    to = body.get("to")
    if not isinstance(to, str) or len(to) > 254 or not ADDRESS.fullmatch(to):
        raise PermanentError(f"invalid e-mail address {to!r}")
    template = body.get("template")
    if template not in TEMPLATES:
        raise PermanentError(f"unknown template {template!r}; known: {sorted(TEMPLATES)}")
    subject, text = TEMPLATES[template]
    fields = {**DEFAULTS, **body}
    try:
        email = EmailMessage()
        email["From"] = SENDER
        email["To"] = to
        email["Subject"] = subject.substitute(fields)
        email.set_content(text.substitute(fields))
    except (KeyError, ValueError) as exc:
        raise PermanentError(f"template {template!r} cannot be rendered: {exc!r}") from exc
    return email


def deliver(email: EmailMessage, *, name: str) -> None:
    """Write the e-mail to ``$S3QUEUE_OUTBOX/<name>.eml`` atomically, or log it."""
    outbox = os.environ.get(OUTBOX_ENV)
    if not outbox:
        logger.info("would send e-mail to %s: %s", email["To"], email["Subject"])
        return
    directory = Path(outbox)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{name}.eml.partial"
    partial.write_bytes(email.as_bytes())
    partial.replace(directory / f"{name}.eml")
    logger.info("sent e-mail to %s: %s", email["To"], email["Subject"])

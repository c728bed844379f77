"""Queue ``send_email``: render an e-mail from a template and send it.

Body: ``{"to": "ada@example.com", "template": "welcome", "name": "Ada"}``; every other field is
available to the template too. An invalid address, an unknown template or a missing field is a
`PermanentError` (straight to the DLQ: retrying cannot fix the message). "Sending" writes the
rendered message to the directory named by ``S3QUEUE_OUTBOX``, or logs it when that is unset,
so the example runs offline.

Sending is made idempotent with Powertools Idempotency and `S3PersistenceLayer`: one record per
message in the queue's own bucket, so a message redelivered after its e-mail went out (a worker
that died before committing) is not sent twice. On Lambda the stack sets ``S3QUEUE_BUCKET``;
offline (``make demo``, unit tests) there is no bucket to keep records in, and e-mails go out
unguarded.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from email.message import EmailMessage
from pathlib import Path
from string import Template
from typing import Any

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from s3queue import Message, PermanentError
from s3queue.contract.environment import ENV_BUCKET
from s3queue.idempotency import S3PersistenceLayer

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

# A record lives a day; the stack's lifecycle rule removes it from the bucket later.
IDEMPOTENCY = IdempotencyConfig(event_key_jmespath="message", expires_after_seconds=24 * 3600)
# A handler never sees the Lambda context, so Powertools cannot bound an in-progress record by
# the remaining time (and warns so): no invocation outlives the worker's timeout instead.
STORE = (
    S3PersistenceLayer.from_env(in_progress_ttl=SETTINGS["timeout"])
    if os.environ.get(ENV_BUCKET)
    else None
)
warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")


def handle(message: Message) -> None:
    """Render the message's e-mail and send it once per message."""
    email = render(message.body)
    send_once(delivery={"message": message.idempotency_key}, email=email)


def send(delivery: dict[str, str], email: EmailMessage) -> None:
    """Deliver `email`; one file per message, so even unguarded a redelivery overwrites it."""
    deliver(email, name=delivery["message"].replace(":", "_"))


send_once = (
    send
    if STORE is None
    else idempotent_function(
        data_keyword_argument="delivery", persistence_store=STORE, config=IDEMPOTENCY
    )(send)
)


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

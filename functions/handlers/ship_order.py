"""Queue ``ship_order``: a typed message. The body is an `Order`, validated before the handler runs.

Body: ``{"order_id": "A-1001", "lines": [{"sku": "BOOK-42", "quantity": 2}],
"ship_to": {"name": "Ada Lovelace", "street": "12 St James's Sq", "city": "London",
"country": "GB"}}``. A body that is not a valid `Order` (a missing field, a quantity of 0, an
unknown key) is dead-lettered at once with pydantic's errors as its reason, and ``handle`` never
sees it. The packing slip is logged, returned, and written to
``$S3QUEUE_OUTBOX/<key>.slip.txt`` when that variable is set.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveInt
from s3queue import Message

SETTINGS = {"max_retries": 3, "batch_size": 10}

OUTBOX_ENV = "S3QUEUE_OUTBOX"

logger = logging.getLogger(__name__)


class Line(BaseModel):
    """One line of an order."""

    model_config = ConfigDict(extra="forbid")
    sku: str = Field(pattern=r"^[A-Z0-9-]{1,32}$")
    quantity: PositiveInt


class Address(BaseModel):
    """Where an order goes."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    street: str = Field(min_length=1, max_length=200)
    city: str = Field(min_length=1, max_length=100)
    country: str = Field(pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2")


class Order(BaseModel):
    """The body of a ``ship_order`` message."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    lines: list[Line] = Field(min_length=1)
    ship_to: Address


def handle(message: Message[Order]) -> dict[str, object]:
    """Write the packing slip of a valid order; ``message.body`` is already an `Order`."""
    order = message.body
    slip = packing_slip(order)
    items = sum(line.quantity for line in order.lines)
    logger.info("order %s: %d items to %s", order.order_id, items, order.ship_to.country)
    outbox = os.environ.get(OUTBOX_ENV)
    if outbox:
        directory = Path(outbox)
        directory.mkdir(parents=True, exist_ok=True)
        name = message.idempotency_key.replace(":", "_")
        partial = directory / f".{name}.slip.txt.partial"
        partial.write_text(slip, encoding="utf-8")
        partial.replace(directory / f"{name}.slip.txt")  # a redelivery overwrites, never doubles
    return {"order_id": order.order_id, "items": items, "country": order.ship_to.country}


def packing_slip(order: Order) -> str:
    """The text of an order's packing slip."""
    to = order.ship_to
    lines = [f"Order {order.order_id}", f"Ship to: {to.name}, {to.street}, {to.city}, {to.country}"]
    lines += [f"  {line.quantity} x {line.sku}" for line in order.lines]
    return "\n".join(lines) + "\n"

"""The names of the objects in a queue's folders, and the fields they carry: a message's
(``<sort_ms>-<id>[~attr]``, `MsgKey`) and a ticket's (``<epoch>-<seq>``). The folders they sit
in are `s3queue.protocol.keys`'s; the attributes are listed there."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass

_MSG = re.compile(r"^(\d{13})-([A-Za-z0-9_-]{1,160})((?:~[a-z][A-Za-z0-9_-]*)*)$")
_TICKET = re.compile(r"^(\d{10})-(\d{10})$")


@dataclass(frozen=True, slots=True)
class MsgKey:
    """The parsed name of a ``msg/`` object."""

    sort_ms: int
    id: str
    group: str | None = None
    not_before_ms: int = 0
    count: int = 1
    origin: str | None = None
    target: str | None = None
    """A late notice's target: ``<sort_ms>-<id>-<not_before_ms>`` of a message of its group."""

    @property
    def ready_ms(self) -> int:
        return max(self.sort_ms, self.not_before_ms)

    def notice(self, now_ms: int, notice_id: str) -> MsgKey:
        """A late notice for this (grouped) message, keyed at `now_ms`."""
        return MsgKey(
            now_ms,
            notice_id,
            self.group,
            target=f"{self.sort_ms:013d}-{self.id}-{self.not_before_ms}",
        )

    def target_key(self) -> MsgKey | None:
        """The message a late notice points at; None for any other key."""
        if self.target is None:
            return None
        sort_ms, message_id, not_before = self.target.split("-")
        return MsgKey(int(sort_ms), message_id, self.group, int(not_before))

    def name(self) -> str:
        parts = [f"{self.sort_ms:013d}-{self.id}"]
        if self.group is not None:
            parts.append("g" + encode_group(self.group))
        if self.not_before_ms:
            parts.append(f"n{self.not_before_ms}")
        if self.count != 1:
            parts.append(f"c{self.count}")
        if self.origin:
            parts.append("o" + self.origin)
        if self.target:
            parts.append("p" + self.target)
        return "~".join(parts)


def encode_group(group: str) -> str:
    return base64.urlsafe_b64encode(group.encode()).decode().rstrip("=")


def _decode_group(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


@functools.lru_cache(maxsize=16_384)
def parse_msg_name(name: str) -> MsgKey | None:
    """The key's fields, or None for a name the library did not write (a foreign object).
    Remembered (a `MsgKey` is immutable): a coordinator meets each pending name in several
    LISTs and again in the ticket that carries it, about 3.4 parses a message without this."""
    match = _MSG.match(name)
    if not match:
        return None
    fields: dict[str, str] = {}
    for attr in match.group(3).split("~")[1:]:
        fields[attr[0]] = attr[1:]
    try:
        return MsgKey(
            sort_ms=int(match.group(1)),
            id=match.group(2),
            group=_decode_group(fields["g"]) if "g" in fields else None,
            not_before_ms=int(fields.get("n", "0")),
            count=int(fields.get("c", "1")),
            origin=fields.get("o"),
            target=_check_target(fields.get("p")),
        )
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


_TARGET = re.compile(r"^\d{13}-[0-9A-Z]{26}-\d+$")


def _check_target(text: str | None) -> str | None:
    if text is not None and not _TARGET.match(text):
        raise ValueError(f"not a late notice's target: {text!r}")
    return text


def ticket_name(epoch: int, seq: int) -> str:
    return f"{epoch:010d}-{seq:010d}"


def parse_ticket_name(name: str) -> tuple[int, int] | None:
    match = _TICKET.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None

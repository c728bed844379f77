"""What a leader tells its successor in the lease, beside the protocol: advisory fields.

No decision about a ticket reads them, so a value that cannot be read is dropped, never a
reason to treat the lease as unreadable (which would seal every epoch and jump to a new one):

- ``pace``: the leader's ticket pace (`sizing.Pace.state`). A successor that has seen no ticket
  finish adopts it and sizes tickets at once, instead of learning again from tickets of
  `batch_size` while a backlog builds: on Lambda a new scheduled run, in a new container, takes
  over every minute (issue 22: the two seconds after each handover had p99 2.5-2.8 s).
- ``ends``: when the holder's run plans to release the lease, by its clock (a Lambda run's
  deadline less its reserve; 0 for a run with no end). A follower asks again just after then
  instead of up to `follow_interval` later (service.py).
- ``frontiers``: where each folder's last scan that read up to the leader's now ended
  (`Cursor.caught_up`, at most `FRONTIERS` folders; "" names the default one). A successor's
  first tick lists what is new from there and, beside it, one page from the folder's start, as
  a dense cursor does (cursor.py: a grouped message past a hole waits, an ungrouped one
  goes): without it, a new leader walked from the start through every message still in
  flight, a page or two a tick, before it saw what had arrived during the handover (issue 22:
  the worst 1 % of enqueue to start at half capacity, in one run of three, was the first
  tickets after a handover).
"""

from __future__ import annotations

from typing import Any

FRONTIERS = 16
"""At most this many folders' frontiers are handed over (the busiest first is not known: the
first ones in order)."""


def pace(doc: dict[str, Any]) -> tuple[float, ...]:
    """The document's pace, or none if it is missing or unreadable."""
    try:
        return tuple(float(v) for v in doc.get("pace", ()))
    except (TypeError, ValueError):
        return ()


def ends(doc: dict[str, Any]) -> int:
    """The document's planned release, or 0 if it is missing or unreadable."""
    try:
        return int(doc.get("ends", 0))
    except (TypeError, ValueError):
        return 0


def no_plan() -> int:
    """The planned release of a run with no end: none."""
    return 0


def frontiers(doc: dict[str, Any]) -> dict[str, str]:
    """The document's frontiers by folder, or none if missing or unreadable."""
    found = doc.get("frontiers", {})
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in list(found.items())[:FRONTIERS] if isinstance(v, str)}


def fields(pace: tuple[float, ...], ends: int, frontiers: dict[str, str]) -> dict[str, Any]:
    """The advisory fields a lease document writes (those set)."""
    doc: dict[str, Any] = {}
    if pace:
        doc["pace"] = [round(v, 3) for v in pace]
    if ends:
        doc["ends"] = ends
    if frontiers:
        doc["frontiers"] = dict(list(frontiers.items())[:FRONTIERS])
    return doc

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
"""

from __future__ import annotations

from typing import Any


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

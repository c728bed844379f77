"""``s3queue schedules``: each scheduled queue of the handler folder and its next slots.

It reads the handler modules as ``s3queue dev`` does (never importing them) and needs no
bucket: a slot's time depends on the schedule alone, and its message id on the slot.
"""

from __future__ import annotations

import argparse
import sys

from s3queue.common.clock import Clock, SystemClock
from s3queue.contract.discovery import discover_handlers
from s3queue.contract.schedule import slot_id, slot_text
from s3queue.local.console import print_table

COLUMNS = ("queue", "schedule", "next slot (UTC)", "message id")


def schedule_rows(handlers: str, now_ms: int, count: int) -> list[list[str]]:
    """One row per upcoming slot of each scheduled queue, `count` per queue, queues by name."""
    rows: list[list[str]] = []
    for queue, spec in discover_handlers(handlers).items():
        schedule = spec.settings.parsed_schedule
        if schedule is None:
            continue
        for i, slot in enumerate(schedule.following(now_ms, count)):
            described = schedule.describe() if i == 0 else ""
            rows.append([queue if i == 0 else "", described, slot_text(slot), slot_id(slot)])
    return rows


def cmd_schedules(args: argparse.Namespace, clock: Clock | None = None) -> int:
    now = (clock or SystemClock()).now_ms()
    rows = schedule_rows(args.handlers, now, args.next)
    if not rows:
        print(f"no handler module in {args.handlers} has a schedule", file=sys.stdout)
        return 0
    print_table(COLUMNS, rows)
    return 0

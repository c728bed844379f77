"""What a schedule can be on Lambda: checked at synth, each error naming the handler's file.

The coordinator Lambda runs once a minute by default (``s3queue:schedule``; EventBridge's
finest rate, with one-minute precision), and a run enqueues the latest due slot of each
scheduled queue. So:

- an interval schedule must be a whole number of the coordinator's periods (minutes, by
  default; minutes, with a ``cron(...)`` coordinator schedule): a finer one (``10``) would be
  enqueued once a period, its other slots lost; a synth that says so beats that surprise
  (``s3queue dev`` and ``run_local`` enqueue every slot as it comes, down to a second);
- ``schedule_catch_up`` must end before the ``ids/`` markers expire (``idsRetentionDays``): a
  slot enqueued again after its marker is gone would run twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from s3queue.contract.discovery import HandlerSpec
from s3queue.errors import ConfigError

MINUTE_S = 60


def check_schedules(
    handlers: Mapping[str, HandlerSpec], coordinator_seconds: int | None, ids_retention_days: int
) -> None:
    """A `ConfigError` naming the file of the first schedule the deployment cannot keep;
    `coordinator_seconds` is the period of the coordinator's ``rate(...)`` (None: ``cron``)."""
    period = coordinator_seconds or MINUTE_S
    for spec in handlers.values():
        schedule = spec.settings.parsed_schedule
        if schedule is None:
            continue
        if schedule.cron is None and schedule.interval_ms % (period * 1000):
            raise ConfigError(
                f"{spec.path}: schedule every {schedule.interval_ms / 1000:g} s: on Lambda the "
                f"coordinator runs every {period} s, so an interval schedule must be a whole "
                f"number of {period} s periods, or a cron expression; finer schedules run "
                "with `s3queue dev` or run_local"
            )
        if spec.settings.schedule_catch_up >= ids_retention_days * 86400:
            raise ConfigError(
                f"{spec.path}: schedule_catch_up ({spec.settings.schedule_catch_up:g} s) must "
                f"be shorter than the ids/ markers' retention ({ids_retention_days} days)"
            )

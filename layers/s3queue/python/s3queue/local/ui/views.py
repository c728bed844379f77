"""The pages: every queue, one queue (partitions, waiting messages, dead letters), one dead
letter in full, and the confirmation pages of the destructive actions. GET only: they read."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template

from s3queue.errors import MessageNotFound
from s3queue.local.ui.board import DEAD_PAGE, PEEK, Board

pages = Blueprint("pages", __name__)


def board() -> Board:
    found: Board = current_app.extensions["s3queue_board"]
    return found


@pages.get("/")
def overview() -> str:
    return render_template("overview.html", rows=board().overview(), where=board().where)


@pages.get("/live/overview")
def overview_live() -> str:
    return render_template("_overview_rows.html", rows=board().overview())


@pages.get("/queues/<name>")
def queue(name: str) -> str:
    stats = board().stats(name)
    found = board().queue(name)
    return render_template(
        "queue.html",
        name=name,
        stats=stats,
        waiting=found.peek(PEEK),
        dead=found.dead_letters(DEAD_PAGE),
        where=board().where,
    )


@pages.get("/queues/<name>/live")
def queue_live(name: str) -> str:
    return render_template("_queue_counts.html", name=name, stats=board().stats(name))


@pages.get("/queues/<name>/dead/<message_id>")
def dead_letter(name: str, message_id: str) -> str:
    letter = board().queue(name).dead_letter(message_id)
    if letter is None:
        raise MessageNotFound(f"no dead letter {message_id!r} in {name} (redriven or deleted?)")
    return render_template("dead.html", name=name, letter=letter, where=board().where)


@pages.get("/queues/<name>/purge")
def confirm_purge(name: str) -> str:
    stats = board().stats(name)
    return render_template("confirm_purge.html", name=name, stats=stats, where=board().where)


@pages.get("/queues/<name>/dead-letters/delete")
def confirm_delete_dead(name: str) -> str:
    stats = board().stats(name)
    return render_template("confirm_delete.html", name=name, stats=stats, where=board().where)

"""Every action is a POST here (the guard checked its origin and token before): redrive or
delete one dead letter or all, purge. Each answers with a redirect to the queue's page and a
one-line message; a destructive one on a whole queue needs the queue's name typed again."""

from __future__ import annotations

from flask import Blueprint, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from s3queue.errors import MessageNotFound
from s3queue.local.ui.views import board

posts = Blueprint("actions", __name__)


def _back(name: str, message: str) -> Response:
    flash(message)
    return redirect(url_for("pages.queue", name=name), code=303)


def _confirmed(name: str) -> None:
    if request.form.get("confirm", "") != name:
        abort(400, f"type the queue's name ({name}) to confirm: nothing was changed")


@posts.post("/queues/<name>/dead/redrive")
def redrive(name: str) -> Response:
    queue = board().queue(name)
    one = request.form.get("id")
    if one:
        if queue.redrive(ids=[one]) == 0:
            raise MessageNotFound(f"no dead letter {one!r} in {name} (redriven or deleted?)")
        return _back(name, f"Redrove dead letter {one}: it is pending again.")
    moved = queue.redrive()
    return _back(name, f"Redrove {moved} dead letters of {name}.")


@posts.post("/queues/<name>/dead/delete")
def delete_dead(name: str) -> Response:
    queue = board().queue(name)
    one = request.form.get("id")
    if one:
        if queue.delete_dead(ids=[one]) == 0:
            raise MessageNotFound(f"no dead letter {one!r} in {name} (redriven or deleted?)")
        return _back(name, f"Deleted dead letter {one}.")
    _confirmed(name)
    return _back(name, f"Deleted {queue.delete_dead()} dead letters of {name}.")


@posts.post("/queues/<name>/purge")
def purge(name: str) -> Response:
    queue = board().queue(name)
    _confirmed(name)
    include_dlq = request.form.get("include_dlq") == "yes"
    count = queue.purge(include_dlq=include_dlq)
    what = "messages and dead letters" if include_dlq else "messages"
    return _back(name, f"Purged {count} {what} of {name}.")

"""Pause and resume a queue (POSTs; the guard checked their origin and token before): the switch
in the bucket every coordinator honours at its next tick (`Queue.pause`)."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, url_for
from werkzeug.wrappers import Response

from s3queue.local.ui.views import board

posts = Blueprint("flow", __name__)


@posts.post("/queues/<name>/pause")
def pause(name: str) -> Response:
    board().queue(name).pause()
    flash(f"Paused {name}: it dispatches nothing new; tickets already out finish.")
    return redirect(url_for("pages.queue", name=name), code=303)


@posts.post("/queues/<name>/resume")
def resume(name: str) -> Response:
    board().queue(name).resume()
    flash(f"Resumed {name}.")
    return redirect(url_for("pages.queue", name=name), code=303)

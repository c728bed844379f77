"""The dashboard's Flask app: the board, the guard, the pages and the actions.

Route modules are Flask blueprints listed in `create_app`; each POST lives in a module of its
own kind (``actions``: dead letters and purge; ``pause``: pause and resume, with the templates
``_pause_controls.html`` on a queue's page and ``_pause_badge.html`` in its row).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from flask import Flask, render_template
from werkzeug.exceptions import HTTPException

from s3queue.errors import InvalidArgument, MessageNotFound, QueueNotFound, S3QueueError
from s3queue.local.ui import actions, pause, views
from s3queue.local.ui.board import Board
from s3queue.local.ui.guard import install

REFRESH_SECONDS = 3


def create_app(board: Board, *, hosts: frozenset[str] = frozenset()) -> Flask:
    """The dashboard of `board`, answering for loopback names and `hosts`."""
    app = Flask(__name__)
    app.extensions["s3queue_board"] = board
    app.config["REFRESH_SECONDS"] = REFRESH_SECONDS
    install(app, hosts)
    app.register_blueprint(views.pages)
    app.register_blueprint(actions.posts)
    app.register_blueprint(pause.posts)
    app.jinja_env.filters.update(when=when, pretty=pretty, rate=rate)
    _errors(app)
    return app


def _errors(app: Flask) -> None:
    @app.errorhandler(QueueNotFound)
    @app.errorhandler(MessageNotFound)
    @app.errorhandler(InvalidArgument)
    def not_found(exc: S3QueueError) -> tuple[str, int]:
        return render_template("error.html", title="Not found", message=str(exc)), 404

    @app.errorhandler(S3QueueError)
    def storage(exc: S3QueueError) -> tuple[str, int]:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return render_template("error.html", title="S3 trouble", message=first), 502

    @app.errorhandler(HTTPException)
    def http(exc: HTTPException) -> tuple[str, int]:
        title = exc.name or "Error"
        return render_template("error.html", title=title, message=exc.description), exc.code or 500


def when(ms: Any) -> str:
    if not isinstance(ms, int) or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def rate(value: Any) -> str:
    """A `trend.Rate` as the overview shows it."""
    if value is None:
        return "measuring..."
    return f"{value.backlog:+.1f}/min backlog, {value.dead:+.1f}/min dead"

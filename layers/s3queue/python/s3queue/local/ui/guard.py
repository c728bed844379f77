"""What keeps another web site, or another host name, from using the dashboard.

- **Host**: only the names the server was bound for (loopback by default) are answered, so a
  DNS-rebinding page cannot read the dashboard through a host name of its own.
- **Every action is a POST** that passes two checks: the browser's own account of where the
  request comes from (``Sec-Fetch-Site`` same-origin or none, and an ``Origin`` equal to the
  dashboard's, when sent), and a CSRF token bound to the session (a random value in the signed,
  ``SameSite=Strict`` session cookie, repeated in every form).
- **Headers**: a Content-Security-Policy that allows only the dashboard's own scripts, styles
  and forms and no framing, ``nosniff``, referrers only to itself.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from flask import Flask, Response, abort, request, session

TOKEN_FIELD = "csrf"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # "same-origin", not "no-referrer": with no referrer, Chromium sends `Origin: null` on a
    # form POST, which the origin check rightly refuses.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def install(app: Flask, hosts: frozenset[str]) -> None:
    """The checks above, on every request of `app`, answering for the host names `hosts`."""
    app.secret_key = secrets.token_bytes(32)  # per process: a restart ends every session
    app.config.update(SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_HTTPONLY=True)
    allowed = LOOPBACK | hosts

    @app.before_request
    def check() -> None:
        if _hostname(request.host) not in allowed:
            abort(400, "unexpected Host header: open the dashboard by the address it printed")
        if request.method == "POST":
            _same_origin()
            _token()

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.update(HEADERS)
        return response

    @app.context_processor
    def token() -> dict[str, str]:
        return {"csrf_token": csrf_token()}


def csrf_token() -> str:
    """This session's token (made on first use)."""
    value = session.get(TOKEN_FIELD)
    if not isinstance(value, str):
        value = secrets.token_urlsafe(32)
        session[TOKEN_FIELD] = value
    return value


def _same_origin() -> None:
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        abort(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.host:
        abort(403, "cross-origin request refused (Origin is not this dashboard)")


def _token() -> None:
    sent = request.form.get(TOKEN_FIELD, "")
    expected = session.get(TOKEN_FIELD)
    if not isinstance(expected, str) or not hmac.compare_digest(sent, expected):
        abort(403, "missing or stale form token: reload the page and try again")


def _hostname(host: str) -> str:
    """The name of a Host header, without its port (IPv6 in brackets too)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host

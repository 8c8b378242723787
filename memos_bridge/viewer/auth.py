"""Who may use the viewer, and proof that a change came from the viewer's own page.

* **Loopback bind** (127.0.0.1, ::1, localhost): the same trust as the data home itself, no login.
* **Any other bind** needs the service's token (`transport.token`): a login page checks it once and sets a
  session cookie (HttpOnly, SameSite=Strict, signed with a key that lives only in this process's memory, so
  a restart logs everybody out and a stolen cookie dies with the process).
* **Every state-changing request** (POST) carries the session's CSRF token in a form field or the
  `X-CSRF-Token` header, and its `Origin`, when the browser sends one, must be this viewer: another web
  page open in the same browser cannot forget or edit memories through it, even on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

COOKIE = "memos_viewer"
SESSION_S = 12 * 3600
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass
class ViewerSession:
    """What the signed cookie holds."""

    csrf: str
    authenticated: bool
    expires: int


class ViewerAuth:
    def __init__(self, host: str, token: str | None) -> None:
        self.loopback = host in LOOPBACK or host.startswith("127.")
        self.token = token
        self._key = secrets.token_bytes(32)

    @property
    def login_required(self) -> bool:
        return not self.loopback

    def check_token(self, supplied: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(
            hashlib.sha256(supplied.encode()).digest(), hashlib.sha256(self.token.encode()).digest()
        )

    def new_session(self, *, authenticated: bool) -> ViewerSession:
        return ViewerSession(secrets.token_urlsafe(24), authenticated or self.loopback, int(time.time()) + SESSION_S)

    def dump(self, session: ViewerSession) -> str:
        body = base64.urlsafe_b64encode(
            json.dumps({"c": session.csrf, "a": session.authenticated, "e": session.expires}).encode()
        ).decode()
        return f"{body}.{self._sign(body)}"

    def load(self, cookie: str | None) -> ViewerSession | None:
        if not cookie or "." not in cookie:
            return None
        body, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac, self._sign(body)):
            return None
        try:
            data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body.encode()))
        except ValueError:
            return None
        session = ViewerSession(str(data.get("c")), bool(data.get("a")), int(data.get("e") or 0))
        return session if session.expires > time.time() else None

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def csrf_ok(session: ViewerSession | None, supplied: str | None) -> bool:
        return session is not None and bool(supplied) and hmac.compare_digest(session.csrf, str(supplied))

    @staticmethod
    def origin_ok(origin: str | None, host_header: str | None) -> bool:
        """A browser's `Origin` (sent on every cross-site POST) must name this viewer; none is fine (the
        CSRF token still has to match)."""
        if not origin or origin == "null":
            return origin is None
        netloc = origin.split("://", 1)[-1].rstrip("/")
        return bool(host_header) and netloc == host_header

"""Who may use a dashboard: its login token, the sessions it gave (cookies), and the Host names it answers
(cluster/client/dashboard/server.py says how requests are checked)."""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import socket
import threading
import time

MAX_SESSIONS = 64  # logins kept (the least recently used is forgotten first)
SESSION_IDLE = 12 * 3600.0  # seconds a session lasts unused


class Gate:
    """The login token of this dashboard and the sessions it gave."""

    def __init__(self, port: int, token: str | None = None, clock=time.monotonic):
        self.token = token or secrets.token_urlsafe(32)
        self.cookie = f"tfdist_dashboard_{port}"  # one name per port: two dashboards do not overwrite each other
        # sha256(session) -> [CSRF token, when last used], least recently used first
        self._sessions: collections.OrderedDict[str, list] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock

    def login(self, candidate: str) -> str | None:
        """A new session (the cookie's value) for the right token; None for anything else."""
        if not hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode()):
            return None
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[_digest(session)] = [secrets.token_urlsafe(24), self._clock()]
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session

    def csrf(self, cookie_header: str | None) -> str | None:
        """The CSRF token of the session the request's cookie names; None without a valid one."""
        session = _cookie(cookie_header, self.cookie)
        if not session:
            return None
        key, now = _digest(session), self._clock()
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                return None
            if now - found[1] > SESSION_IDLE:
                del self._sessions[key]
                return None
            found[1] = now
            self._sessions.move_to_end(key)
            return found[0]

    def logout(self, cookie_header: str | None) -> None:
        session = _cookie(cookie_header, self.cookie)
        if session:
            with self._lock:
                self._sessions.pop(_digest(session), None)

    def set_cookie(self, session: str) -> str:
        return f"{self.cookie}={session}; Path=/; HttpOnly; SameSite=Strict"


def _digest(session: str) -> str:
    return hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()


def _cookie(header: str | None, name: str) -> str:
    """The value of cookie `name` in a Cookie header ("" if absent)."""
    for part in (header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return ""


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host headers this server answers (None: any, when it listens on every address)."""
    if is_wildcard(host):
        return None
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
    return frozenset(f"{name}:{port}" for name in names)


def url_host(host: str) -> str:
    """How a URL names the listening host (a wildcard: this machine's name)."""
    if is_wildcard(host):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host

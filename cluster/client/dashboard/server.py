"""The dashboard's HTTP side: the login, the checks every request passes, the routes and the static assets.

Other users of a machine reach its loopback too, so nothing but the login page and the assets (which hold
no data) answers without a session:

- `tfdist dashboard` makes a random token (256 bits) and prints a login link, `/login?token=...`. The link, or
  the token pasted into the login form, gives a session: a random cookie value, HttpOnly (no script reads
  it) and SameSite=Strict (no other site's page sends it). Token and sessions are compared in constant time
  (a session by its SHA-256, so a lookup leaks nothing of the cookie). A session unused for SESSION_IDLE
  ends; the token lives as long as this process.
- Without a session a page gets the login form (401) and /api/... a 401 JSON error.
- A request whose Host header is not this server's address is refused (a DNS-rebinding page would send its
  own name), unless the dashboard listens on every address (--host 0.0.0.0).
- What changes something is a POST with an Origin header equal to this server's own origin and, for
  /api/..., the session's CSRF token in the X-Tfdist-Csrf header (the page reads it from /api/session, which
  another origin cannot). Cookies do not tell ports apart: a page served from another port of this host
  would be same-site, and these checks stop it.
- Every answer forbids framing, sniffing, referrers and caching, and its Content-Security-Policy allows
  only this origin's own script and style (no inline script): a job name or log line is text, never markup.
- TensorBoard is served under /tensorboard/<job id>/ behind the same session (cluster/client/
  tensorboard_app.py): its pages keep TensorBoard's own Content-Security-Policy, and its POSTs need this
  server's Origin (TensorBoard's page sends no CSRF header of ours).
- At most MAX_CONNECTIONS connections are served at once; more are closed unanswered. A client that hangs
  up mid-answer is not an error.
"""

from __future__ import annotations

import hmac
import html
import json
import logging
import os
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cluster.client import tensorboard_app
from cluster.client.dashboard.api import Answer, Api, check_job_id
from cluster.client.dashboard.diagnoses import Diagnoses
from cluster.client.dashboard.gate import Gate, allowed_hosts
from cluster.shared import limits
from tfdist.errors import UserError

log = logging.getLogger("tfdist.dashboard")

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
DEFAULT_PORT = 7490
PORTS_TRIED = 20  # --port not given: 7490, else the next free of this many
MAX_BODY = 4096  # a login form; API posts carry nothing
MAX_CONNECTIONS = 64  # served at once (a thread each); a page keeps one or two
CSRF_HEADER = "X-Tfdist-Csrf"
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"))
# the pages the page's script draws
PAGES = re.compile(r"^/(?:cluster|experiments|diagnoses|(?:jobs|experiments|diagnoses)/[A-Za-z0-9._-]{1,64})?$")
EXPERIMENT_API = re.compile(r"^/api/experiments/([A-Za-z0-9._-]{1,64})$")
JOB_API = re.compile(r"^/api/jobs/([^/]{1,64})(?:/(logs|metrics|cancel|preempt|resume))?$")
TENSORBOARD = re.compile(r"^/tensorboard/([^/]{1,64})(/.*)?$")
ACTIONS = ("cancel", "preempt", "resume")

LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tfdist dashboard: log in</title><link rel="stylesheet" href="/assets/style.css"></head>
<body class="login"><main class="login-box">
<h1>tfdist dashboard</h1>
<p>Open the login link <code>tfdist dashboard</code> printed, or paste its token here.</p>
{problem}<form method="post" action="/login">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus required>
<button type="submit">Log in</button>
</form></main></body></html>
"""


class Dashboard:
    """What every request needs: the gate, the API, the assets and the addresses it answers to. `tensorboard`
    gives a job's TensorBoard application (or the Answer why not); `home` is where `/` and a login lead.
    Without an API (`tfdist tensorboard ID`) only the login and TensorBoard are served."""

    def __init__(self, api: Api | None, gate: Gate, hosts: frozenset[str] | None,
                 tensorboard=None, home: str = "/"):
        self.api, self.gate, self.hosts, self.home = api, gate, hosts, home
        self.diagnoses = Diagnoses(api) if api is not None else None  # `tfdist diagnose`'s runs (diagnoses.py)
        self.tensorboard = tensorboard or (api.tensorboard if api is not None else None)
        self.assets = {}
        for name in sorted(os.listdir(ASSETS)) if os.path.isdir(ASSETS) else ():
            kind = CONTENT_TYPES.get(os.path.splitext(name)[1])
            if kind:
                with open(os.path.join(ASSETS, name), "rb") as f:
                    self.assets[name] = (kind, f.read())


class Handler(BaseHTTPRequestHandler):
    server_version = "tfdist-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # the page's polls reuse one connection
    timeout = 30  # an idle kept-alive connection is closed after this long

    @property
    def dashboard(self) -> Dashboard:
        return self.server.dashboard  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
        log.debug("%s %s", self.address_string(), format % args)

    # ---------------------------------------------------------------- answering
    def _send(self, status: int, body: bytes, content_type: str, headers: tuple = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (*SECURITY_HEADERS, *headers):
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, answer: Answer) -> None:
        body = json.dumps(answer.document, allow_nan=False).encode()
        self._send(answer.status, body, "application/json")

    def _login_page(self, status: int, problem: str = "") -> None:
        shown = f'<p class="problem" role="alert">{html.escape(problem)}</p>\n' if problem else ""
        self._send(status, LOGIN_PAGE.format(problem=shown).encode(), CONTENT_TYPES[".html"])

    def _redirect(self, where: str, headers: tuple = ()) -> None:
        self._send(303, b"", "text/plain", (("Location", where), *headers))

    def _asset(self, name: str) -> None:
        found = self.dashboard.assets.get(name)
        if found is None:
            self._send(404, b"not found", "text/plain")
        else:
            self._send(200, found[1], found[0])

    # ---------------------------------------------------------------- checks
    def _host_ok(self) -> bool:
        hosts = self.dashboard.hosts
        if hosts is None or self.headers.get("Host", "") in hosts:
            return True
        self._send(421, b"this dashboard does not answer to that host name", "text/plain")
        return False

    def _same_origin(self) -> bool:
        """A POST from this server's own page: its Origin is http://<the Host it asked>."""
        origin, host = self.headers.get("Origin", ""), self.headers.get("Host", "")
        return bool(origin and host) and hmac.compare_digest(origin.encode(), f"http://{host}".encode())

    def _body(self, most: int) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= most:
            self.close_connection = True
            self._send(413, b"request body too large", "text/plain")
            return None
        return self.rfile.read(length) if length else b""

    # ---------------------------------------------------------------- routes
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _answer(self, route) -> None:
        try:
            route()
        except ConnectionError:  # the client hung up: nobody to answer
            self.close_connection = True
        except Exception as e:  # one request's bug must not end the server; the page shows it
            log.exception("dashboard %s %s", self.command, self.path)
            try:
                self._json(Answer(500, {"error": f"the dashboard failed: {type(e).__name__}: {e}"}))
            except ConnectionError:
                self.close_connection = True

    def _get(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        path = url.path
        try:
            query = parse_qs(url.query, max_num_fields=8)
        except ValueError:
            return self._send(400, b"too many query fields", "text/plain")
        if path.startswith("/assets/"):
            return self._asset(path[len("/assets/"):])
        gate = self.dashboard.gate
        if path == "/login":
            token = query.get("token", [""])[0]
            if not token:
                return self._login_page(200)
            return self._log_in(token)
        if path == "/favicon.ico":
            return self._asset("icon.svg")
        csrf = gate.csrf(self.headers.get("Cookie"))
        if csrf is None:
            if path.startswith("/api/"):
                return self._json(Answer(401, {"error": "log in first: open the login link `tfdist dashboard` "
                                                        "printed"}))
            return self._login_page(401)
        if path.startswith(tensorboard_app.PREFIX):
            return self._tensorboard(path, b"")
        if path == "/" and self.dashboard.home != "/":
            return self._redirect(self.dashboard.home)
        if self.dashboard.api is None:
            return self._send(404, b"not found", "text/plain")
        if path.startswith("/api/"):
            return self._json(self._read(path, query, csrf))
        if PAGES.match(path):
            return self._asset("index.html")
        self._send(404, b"not found", "text/plain")

    def _tensorboard(self, path: str, body: bytes) -> None:
        """A request to a job's TensorBoard (the session already checked)."""
        match = TENSORBOARD.match(path)
        try:
            job_id = check_job_id(match.group(1)) if match else ""
        except UserError as e:
            return self._send(400, str(e).encode(), "text/plain; charset=utf-8")
        if not match or self.dashboard.tensorboard is None:
            return self._send(404, b"not found", "text/plain")
        if not match.group(2):
            return self._redirect(tensorboard_app.prefix(job_id) + "/")
        found = self.dashboard.tensorboard(job_id)
        if isinstance(found, Answer):
            return self._send(found.status, found.document["error"].encode(), "text/plain; charset=utf-8")
        status, headers, answer = tensorboard_app.call(found, tensorboard_app.environ(self, body))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    def _read(self, path: str, query: dict, csrf: str) -> Answer:
        api = self.dashboard.api
        if path == "/api/session":
            return api.session(csrf)
        if path == "/api/cluster":
            return api.cluster()
        if path == "/api/jobs":
            return api.jobs()
        if path == "/api/experiments":
            return api.experiments()
        if path.startswith("/api/diagnoses"):
            return self.dashboard.diagnoses.answer(path)
        if found := EXPERIMENT_API.match(path):
            return api.experiment(found.group(1))
        match = JOB_API.match(path)
        if not match or match.group(2) in ACTIONS:
            return Answer(404, {"error": f"no such API: {path[:100]}"})
        try:
            job_id = check_job_id(match.group(1))
            if match.group(2) == "logs":
                return api.logs(job_id, _int(query, "after", 0, 0, 2**62), _int(query, "rank", -1, -1, limits.MAX_RANK))
        except UserError as e:
            return Answer(400, {"error": str(e)})
        if match.group(2) == "metrics":
            return api.metrics(job_id)
        return api.job(job_id)

    def _post(self) -> None:
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        board = path.startswith(tensorboard_app.PREFIX)
        body = self._body(tensorboard_app.MAX_BODY if board else MAX_BODY)
        if body is None:
            return
        if not self._same_origin():
            return self._json(Answer(403, {"error": "refused: this request did not come from the dashboard's own "
                                                    "page (its Origin header is missing or another site's)"}))
        gate = self.dashboard.gate
        if path == "/login":
            try:
                form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
            except ValueError:
                return self._login_page(400, "That was not a login form.")
            return self._log_in(form.get("token", [""])[0])
        csrf = gate.csrf(self.headers.get("Cookie"))
        if csrf is None:
            return self._json(Answer(401, {"error": "log in first: open the login link `tfdist dashboard` printed"}))
        if board:
            return self._tensorboard(path, body)
        if not hmac.compare_digest(self.headers.get(CSRF_HEADER, "").encode("utf-8", "replace"), csrf.encode()):
            return self._json(Answer(403, {"error": f"refused: the request lacks the page's {CSRF_HEADER} header"}))
        if path == "/logout":
            gate.logout(self.headers.get("Cookie"))
            return self._json(Answer(200, {"message": "logged out"}))
        match = JOB_API.match(path)
        if not match or match.group(2) not in ACTIONS or self.dashboard.api is None:
            return self._json(Answer(404, {"error": f"no such action: {path[:100]}"}))
        try:
            job_id = check_job_id(match.group(1))
        except UserError as e:
            return self._json(Answer(400, {"error": str(e)}))
        self._json(self.dashboard.api.act(job_id, match.group(2)))

    def _log_in(self, token: str) -> None:
        session = self.dashboard.gate.login(token)
        if session is None:
            return self._login_page(403, "That token is not this dashboard's: copy the link `tfdist dashboard` "
                                         "printed when it started (each start makes a new one).")
        self._redirect(self.dashboard.home, (("Set-Cookie", self.dashboard.gate.set_cookie(session)),))


def _int(query: dict, name: str, default: int, low: int, high: int) -> int:
    text = query.get(name, [""])[0]
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{name}={text[:20]!r} is not an integer") from None
    if not low <= value <= high:
        raise UserError(f"{name}={value} is out of range ({low} to {high})")
    return value


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a request waiting on the coordinator does not keep the process alive
    block_on_close = False

    def __init__(self, address: tuple[str, int]):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)
        self.dashboard: Dashboard | None = None
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:
        """A thread for the connection while fewer than MAX_CONNECTIONS are served; else it is closed."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """A connection the client dropped is not worth a traceback; anything else is logged."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            log.exception("dashboard connection from %s", client_address[0] if client_address else "?")


def listen(host: str, port: int | None, default_port: int = DEFAULT_PORT) -> Server:
    """A server bound to `host`: on `port`, or (None) on `default_port` or the next free one."""
    candidates = [port] if port is not None else range(default_port, default_port + PORTS_TRIED)
    last: OSError | None = None
    for candidate in candidates:
        try:
            return Server((host, candidate))
        except OSError as e:
            last = e
            if port is not None or e.errno not in (98, 13):  # EADDRINUSE, EACCES: try the next
                break
    where = f"{host}:{port}" if port is not None else \
        f"{host} (ports {default_port}-{default_port + PORTS_TRIED - 1} are taken)"
    raise UserError(f"tfdist cannot listen on {where}: {last.strerror if last else 'no port'}; choose "
                    "another with --port (0: any free port) or --host") from None


def serve(api: Api | None, host: str, port: int | None, token: str | None = None, *, tensorboard=None,
          home: str = "/", default_port: int = DEFAULT_PORT) -> tuple[Server, Gate]:
    """A server ready to serve_forever (the caller runs it): bound, with its gate and API (Dashboard's
    arguments)."""
    server = listen(host, port, default_port)
    bound = server.server_address[1]
    gate = Gate(bound, token)
    server.dashboard = Dashboard(api, gate, allowed_hosts(host, bound), tensorboard, home)
    return server, gate


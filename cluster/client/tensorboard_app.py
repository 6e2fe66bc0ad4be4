"""TensorBoard behind tfdist's login: its WSGI application, run inside the dashboard's HTTP server.

TensorBoard has no login, and a TensorBoard listening on loopback is open to every user of the machine. So
tfdist never lets it listen: TensorBoard's own Python API builds its application (with a server class that
only keeps it), and the dashboard's server hands it the requests that passed its checks (a session cookie,
the Host header, a same-origin POST), under /tensorboard/<job id>/ (TensorBoard's --path_prefix). Both
`tfdist dashboard` and `tfdist tensorboard ID` serve it that way.

TensorBoard reads event files through TensorFlow when it can import it (3 s and 500 MB here); the module
`tensorboard.compat.notf`, TensorBoard's own switch, makes it use its bundled reader instead.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import NotFoundError, UserError
from tfdist.event_files import job_event_dir

INSTALL_HINT = "pip install 'tfdist[tensorboard]'"
NOT_STARTED = ("QUEUED", "STARTING")
PREFIX = "/tensorboard/"
MAX_BODY = 1 << 20  # TensorBoard's own POSTs (a form naming runs and tags) are small
MAX_BOARDS = 16  # TensorBoards one process keeps (each keeps a thread re-reading its files)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
              "proxy-authorization"}
FORCED_HEADERS = (("X-Frame-Options", "SAMEORIGIN"),  # TensorBoard frames its own plugins
                  ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"))

WsgiApp = Callable[[dict, Callable], Iterable[bytes]]


def check_installed() -> None:
    """Said before anything is asked of a coordinator."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError(f"tfdist tensorboard needs TensorBoard, which is not installed for {sys.executable}: "
                        f"{INSTALL_HINT}")


def event_dir(job: pb.Job) -> str:
    """The job's event-file directory on this machine, or one line saying why there is none to serve."""
    directory = job_event_dir(job.id, job.spec.config.checkpoint_storage, job.spec.working_dir)
    if not directory:
        raise NotFoundError(f"job {job.id} records neither a checkpoint_storage nor a working directory, so it has "
                            "no place for TensorBoard event files; `tensorboard --logdir DIR` serves files "
                            "written with MetricsReporter(tensorboard_dir=DIR)")
    if os.path.isdir(directory):
        return directory
    if job.state in NOT_STARTED:
        raise NotFoundError(f"job {job.id} is {job.state}: no TensorBoard event files yet (they go to {directory})")
    chief = next((p.agent for p in job.placement if p.node_rank == 0), "")
    raise NotFoundError(
        f"job {job.id}: no TensorBoard event files in {directory} on this machine; the job's chief writes them "
        f"there with MetricsReporter(tensorboard=True){f' on node {chief}' if chief else ''}. Without a "
        "filesystem shared with that node, run `tfdist tensorboard` there, or give the job a checkpoint_storage "
        "every node and this machine share")


def prefix(job_id: str) -> str:
    """Where job `job_id`'s TensorBoard is served, without the trailing slash (TensorBoard's --path_prefix)."""
    return PREFIX + job_id


def wsgi_app(directory: str, path_prefix: str) -> WsgiApp:
    """TensorBoard's application on `directory`, served under `path_prefix`; nothing listens."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard import program

    kept: list[WsgiApp] = []

    class Kept(program.TensorBoardServer):
        def __init__(self, app, flags):  # noqa: D107 (TensorBoard's signature)
            kept.append(app)

        def serve_forever(self):
            pass  # the dashboard's server serves it

        def get_url(self):
            return path_prefix + "/"

    board = program.TensorBoard(server_class=Kept)
    board.configure(logdir=directory, path_prefix=path_prefix, load_fast="false")
    board.launch()
    return kept[0]


class Boards:
    """The TensorBoard applications of one process, one per job, made on first use (seconds: it imports
    TensorBoard) and kept (MAX_BOARDS at most: each keeps a thread that re-reads its event files)."""

    def __init__(self, make: Callable[[str, str], WsgiApp] = wsgi_app):
        self._make = make
        self._apps: dict[str, WsgiApp] = {}
        self._lock = threading.Lock()  # the dict, and one TensorBoard made at a time

    def get(self, job_id: str) -> WsgiApp | None:
        with self._lock:
            return self._apps.get(job_id)

    def open(self, job_id: str, directory: str) -> WsgiApp:
        """The job's application, made now on `directory` if this process has none yet."""
        with self._lock:
            app = self._apps.get(job_id)
            if app is None:
                if len(self._apps) >= MAX_BOARDS:
                    raise UserError(f"this process already serves TensorBoard for {MAX_BOARDS} jobs "
                                    f"({', '.join(sorted(self._apps))}); restart it to open another")
                app = self._apps[job_id] = self._make(directory, prefix(job_id))
            return app


def environ(handler: Any, body: bytes) -> dict[str, Any]:
    """The WSGI environment of a request a BaseHTTPRequestHandler read (the dashboard's cookie left out:
    TensorBoard has no use for it)."""
    from urllib.parse import unquote, urlsplit

    url = urlsplit(handler.path)
    host, port = handler.server.server_address[:2]
    found = {
        "REQUEST_METHOD": handler.command, "SCRIPT_NAME": "",
        "PATH_INFO": unquote(url.path, encoding="latin-1"), "QUERY_STRING": url.query,
        "CONTENT_TYPE": handler.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
        "SERVER_NAME": str(host), "SERVER_PORT": str(port), "SERVER_PROTOCOL": handler.request_version,
        "REMOTE_ADDR": handler.client_address[0] if handler.client_address else "",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for key, value in handler.headers.items():
        name = key.upper().replace("-", "_")
        if name in ("COOKIE", "CONTENT_TYPE", "CONTENT_LENGTH"):
            continue
        found["HTTP_" + name] = value
    return found


def call(app: WsgiApp, environ_: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run the application on one request: its status, headers (hop-by-hop ones dropped, framing and
    sniffing forbidden) and whole body."""
    started: list = []

    def start_response(status: str, headers: list, exc_info=None):
        started[:] = [status, headers]
        return lambda data: chunks.append(data)

    chunks: list[bytes] = []
    result = app(environ_, start_response)
    try:
        chunks.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started
    kept = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
    named = {k.lower() for k, _ in kept}
    kept += [(k, v) for k, v in FORCED_HEADERS if k.lower() not in named]
    return int(status.split()[0]), kept, b"".join(chunks)

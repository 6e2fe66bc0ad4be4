"""A job's key-value store, served by the agent of the job's first node, for every mode: tfdist's
collectives of small values (`ctx.allgather`, ..., tfdist/collectives.py) and Horovod's Gloo rendezvous.

Horovod's own launcher (`horovodrun`) starts such a store and ssh-es into every host; tfdist starts the
workers itself, so it serves the store too. The protocol is Horovod's HTTP store: `PUT /scope/key`
stores the body, `GET /scope/key` answers it or 404 (Gloo polls until the key appears), `DELETE`
says a rank is done with a scope. Gloo's rendezvous writes one key per rank in the "global" scope,
which is how the agent learns that a rank joined (Horovod scripts never call tfdist.init()).
"""

from __future__ import annotations

import http.server
import re
import threading

COLLECTIVES_SCOPE = "tfdist"  # tfdist/collectives.py's keys live here
MAX_VALUE = 1 << 20  # Gloo puts addresses (tens of bytes); collectives carry small values
_RANK_KEY = re.compile(r"^(?:rank_)?(\d+)$")


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10  # a client that stops mid-request does not hold a thread forever
    server: "_Server"

    def _parts(self) -> tuple[str, str] | None:
        parts = self.path.split("/")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            self._answer(400)
            return None
        return parts[1], parts[2]

    def _answer(self, code: int, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's names)
        parts = self._parts()
        if parts:
            value = self.server.store.get(parts)
            self._answer(404) if value is None else self._answer(200, value)

    def do_PUT(self):  # noqa: N802
        parts = self._parts()
        if not parts:
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_VALUE:
            self._answer(400)
            return
        self.server.store.put(parts, self.rfile.read(length))
        self._answer(200)

    def do_DELETE(self):  # noqa: N802
        parts = self._parts()
        if parts:
            # tfdist's collectives delete what every rank has read; Gloo's DELETE only says "done with
            # this scope", and a late reader of the same scope must still find the key.
            if parts[0] == COLLECTIVES_SCOPE:
                self.server.store.delete(parts)
            self._answer(200)

    def log_message(self, format, *args):  # noqa: A002
        pass


class _Store:
    def __init__(self):
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], bytes] = {}

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self._lock:
            return self._values.get(key)

    def put(self, key: tuple[str, str], value: bytes) -> None:
        with self._lock:
            self._values[key] = value

    def delete(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._values.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def ranks_joined(self) -> set[int]:
        with self._lock:
            keys = [k for s, k in self._values if s == "global"]
        return {int(m.group(1)) for m in map(_RANK_KEY.match, keys) if m}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address):
        self.store = _Store()
        super().__init__(address, _Handler)


class JobStore:
    """Serves the store on (host, port) in a background thread until `stop()`."""

    def __init__(self, host: str, port: int):
        self._server = _Server((host, port))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"job-store-{port}", daemon=True)

    def start(self) -> "JobStore":
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def ranks_joined(self) -> set[int]:
        return self._server.store.ranks_joined()

    def get(self, scope: str, key: str) -> bytes | None:
        return self._server.store.get((scope, key))

    def put(self, scope: str, key: str, value: bytes) -> None:
        """Writes a key as a worker's PUT would (the agent's own requests, e.g. a preemption)."""
        self._server.store.put((scope, key), value)

    def key_count(self) -> int:
        """Keys held (what collectives leave behind is bounded). Not __len__: an empty store must not be falsy."""
        return len(self._server.store)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

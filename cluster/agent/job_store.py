"""A job's key-value store, served by the agent of the job's first node, for every mode: tfdist's
collectives of small values (`ctx.allgather`, ..., tfdist/collectives.py), synchronized preemption and
Horovod's Gloo rendezvous.

Horovod's own launcher (`horovodrun`) starts such a store and ssh-es into every host; tfdist starts the
workers itself, so it serves the store too. The protocol is Horovod's HTTP store, behind the job run's
secret: `PUT /<secret>/scope/key` stores the body, `GET /<secret>/scope/key` answers it or 404 (Gloo
polls until the key appears), `DELETE` says a rank is done with a scope. Gloo's rendezvous writes one key
per rank in the "global" scope, which is how the agent learns that a rank joined (Horovod scripts never
call tfdist.init()).

The secret is the first segment of every path (Gloo's HTTP client cannot add a header; its URL is
`http://<HOROVOD_GLOO_RENDEZVOUS_ADDR>:<PORT>/<scope>/<key>`, so the address carries `host:port/<secret>`
and the segment arrives as `<secret>:<port>`, which is accepted too). A request without it is answered
403 before anything is read or stored.

Bounded by construction: one thread (an asyncio loop) serves every connection, so a flood costs sockets,
not threads; at most `max_connections` are open (a new one closes the oldest, which under a flood is the
flood's: a rank's request lasts milliseconds); each connection has `REQUEST_TIMEOUT` seconds for its whole
request and answer (a slowloris client is cut off); the listen backlog is large; a PUT must announce its
length (chunked or length-less: 411); values, keys and the job's total are capped. Every refusal names
its limit in the reason and the body, which tfdist/collectives.py turns into one error.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import resource
import secrets
import socket
import threading

log = logging.getLogger("tfdist.agent")

COLLECTIVES_SCOPE = "tfdist"  # tfdist/collectives.py's keys live here
MAX_VALUE = 1 << 20  # bytes per value: Gloo puts addresses (tens of bytes); collectives carry small values
MAX_TOTAL = 64 << 20  # bytes of keys and values a job's store holds at once
MAX_KEYS = 65536  # keys held at once (Gloo writes a few per rank; collectives delete what was read)
MAX_HEAD = 16 << 10  # bytes of a request's line and headers
MAX_CONNECTIONS = 2048  # open at once (fewer when the agent may open few files: a quarter of its limit)
MAX_BODIES = 32  # PUT bodies being read at once (their bytes are held until stored)
REQUEST_TIMEOUT = 5.0  # seconds a connection has to send its request and take the answer
LINGER = 1.0  # seconds an error answer waits for the unread rest of a request before closing
BACKLOG = 4096  # connections the kernel queues before the loop accepts them (capped by somaxconn)
ACCEPT_BATCH = 16  # connections taken per turn of the loop: what they sent is read before more are taken
_RANK_KEY = re.compile(r"^(?:rank_)?(\d+)$")


class _Refusal(Exception):
    """A request the store answers with an error: `limit` names what it hit."""

    def __init__(self, code: int, limit: str, detail: str):
        super().__init__(detail)
        self.code, self.limit, self.detail = code, limit, detail


class _Values:
    """The keys and values, with their byte and count caps; shared by the loop and the agent's thread."""

    def __init__(self, max_total: int, max_keys: int):
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], bytes] = {}
        self._bytes = 0
        self.max_total, self.max_keys = max_total, max_keys

    @staticmethod
    def _size(key: tuple[str, str], value: bytes) -> int:
        return len(key[0]) + len(key[1]) + len(value)

    def check_room(self, key: tuple[str, str], length: int) -> None:
        with self._lock:
            self._check(key, length)

    def _check(self, key: tuple[str, str], length: int) -> None:
        old = self._values.get(key)
        if old is None and len(self._values) >= self.max_keys:
            raise _Refusal(507, "key-count", f"the job's store holds {len(self._values)} keys, its limit")
        grown = self._bytes - (self._size(key, old) if old is not None else 0) + self._size(key, b"") + length
        if grown > self.max_total:
            raise _Refusal(507, "job-total", f"storing {length} bytes would bring the job's store to {grown} "
                                             f"bytes; its limit is {self.max_total}")

    def put(self, key: tuple[str, str], value: bytes, bounded: bool = True) -> None:
        with self._lock:
            if bounded:
                self._check(key, len(value))
            old = self._values.get(key)
            self._bytes += self._size(key, value) - (self._size(key, old) if old is not None else 0)
            self._values[key] = value

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self._lock:
            return self._values.get(key)

    def delete(self, key: tuple[str, str]) -> None:
        with self._lock:
            old = self._values.pop(key, None)
            if old is not None:
                self._bytes -= self._size(key, old)

    def count(self) -> tuple[int, int]:
        with self._lock:
            return len(self._values), self._bytes

    def ranks_joined(self) -> set[int]:
        with self._lock:
            keys = [k for s, k in self._values if s == "global"]
        return {int(m.group(1)) for m in map(_RANK_KEY.match, keys) if m}


def _connection_cap() -> int:
    """MAX_CONNECTIONS, or a quarter of the files this process may open when that is fewer. The agent
    first raises its own limit toward the hard one (most hosts' soft 1024 is a default, not a policy)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * MAX_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        except (ValueError, OSError):
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(16, min(MAX_CONNECTIONS, soft // 4))


class _Protocol:
    """Serves connections on the loop's thread: one request each, then the connection closes."""

    def __init__(self, secret: str, port: int, values: _Values, max_connections: int, timeout: float):
        self._credentials = (secret.encode(), f"{secret}:{port}".encode())
        self.port, self.values, self.max_connections, self.timeout = port, values, max_connections, timeout
        self.open: dict[asyncio.StreamWriter, bool] = {}  # oldest first -> answered yet
        self.refused = 0  # requests without the secret
        self.timed_out = 0  # connections cut at the time limit
        self.peak = 0
        self.closing = False
        self._bodies: asyncio.Semaphore | None = None

    async def accepted(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
        except OSError:
            conn.close()
            return
        await self.connection(reader, writer)

    def out_of_files(self, error: OSError) -> None:
        log.warning("job store on port %d: %s; closing its oldest connection", self.port, error.strerror)
        if self.open:
            self._close_oldest()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._bodies is None:
            self._bodies = asyncio.Semaphore(MAX_BODIES)
        if self.closing:
            writer.transport.abort()
            return
        self.open[writer] = False
        self.peak = max(self.peak, len(self.open))
        while len(self.open) > self.max_connections:
            self._close_oldest()
        try:
            async with asyncio.timeout(self.timeout):
                await self._one_request(reader, writer)
        except TimeoutError:
            self.timed_out += 1
            self._answer(writer, _Refusal(408, "request-time", f"the request and its answer took over "
                                                               f"{self.timeout:g}s"))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer went, or the connection was closed to make room
        finally:
            self.open.pop(writer, None)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        headers: dict[str, str] = {}
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise _Refusal(431, "header-size", f"a request's line and headers are limited to {MAX_HEAD} "
                                                   "bytes") from None
            method, target, headers = _parse_head(head)
            key = self._key(target, writer)
            if method is None:
                raise _Refusal(400, "malformed", "not an HTTP/1.x request")
            await self._serve(method, key, headers, reader, writer)
        except _Refusal as e:
            self._answer(writer, e)
            if _announced_body(headers):
                await _linger(writer, reader)
            return
        await writer.drain()

    def _key(self, target: str, writer: asyncio.StreamWriter) -> tuple[str, str]:
        parts = target.split("/")
        credential = parts[1].encode("latin-1") if len(parts) > 1 else b""
        if not any(hmac.compare_digest(credential, c) for c in self._credentials):
            self.refused += 1
            if self.refused == 1:
                log.warning("job store on port %d refused a request without the job's secret from %s (further "
                            "refusals are counted, not logged)", self.port, writer.get_extra_info("peername"))
            raise _Refusal(403, "secret", "the request does not carry the job's store secret (TFDIST_STORE_SECRET, "
                                          "which the agent gives each worker it starts)")
        if len(parts) != 4 or not parts[2] or not parts[3]:
            raise _Refusal(400, "malformed", "the path is /<secret>/<scope>/<key>")
        return parts[2], parts[3]

    async def _serve(self, method: str, key: tuple[str, str], headers: dict[str, str],
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if method == "GET":
            value = self.values.get(key)
            self._answer(writer, 200, value) if value is not None else self._answer(writer, 404)
        elif method == "PUT":
            length = _length(headers)
            self.values.check_room(key, length)
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            assert self._bodies is not None
            async with self._bodies:
                body = await reader.readexactly(length)
            self.values.put(key, body)
            self._answer(writer, 200)
        elif method == "DELETE":
            # tfdist's collectives delete what every rank has read; Gloo's DELETE only says "done with
            # this scope", and a late reader of the same scope must still find the key.
            if key[0] == COLLECTIVES_SCOPE:
                self.values.delete(key)
            self._answer(writer, 200)
        else:
            raise _Refusal(405, "method", f"{method} is not GET, PUT or DELETE")

    def _answer(self, writer: asyncio.StreamWriter, answer: int | _Refusal, value: bytes = b"") -> None:
        """One answer per connection. A refusal's reason phrase is the limit it hit, its body says more
        (Gloo's client reads only the code; tfdist's reads both)."""
        if writer.is_closing() or self.open.get(writer, True):
            return
        self.open[writer] = True
        if isinstance(answer, _Refusal):
            code, reason, value = answer.code, answer.limit, f"tfdist job store: {answer.detail}".encode()
        else:
            code, reason = answer, {200: "OK", 404: "Not Found"}[answer]
        writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(value)}\r\nConnection: close\r\n\r\n"
                     .encode() + value)

    def _close_oldest(self) -> None:
        oldest = next(iter(self.open))
        self._answer(oldest, _Refusal(503, "connections", f"the store closed this connection to make room: it "
                                                          f"keeps at most {self.max_connections} open"))
        del self.open[oldest]
        oldest.close()


def _parse_head(head: bytes) -> tuple[str | None, str, dict[str, str]]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    words = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
        if not colon:
            return None, words[1] if len(words) > 1 else "", headers
    if len(words) != 3 or not words[1].startswith("/") or not words[2].startswith("HTTP/1."):
        return None, words[1] if len(words) > 1 else "", headers
    return words[0], words[1], headers


def _announced_body(headers: dict[str, str]) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")


def _length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers or "content-length" not in headers:
        raise _Refusal(411, "length-required", "a PUT must carry Content-Length (chunked bodies are not stored)")
    text = headers["content-length"]
    if not text.isdigit() or len(text) > 12:
        raise _Refusal(400, "malformed", f"Content-Length {text[:20]!r} is not a byte count")
    if int(text) > MAX_VALUE:
        raise _Refusal(413, "value-size", f"a value of {int(text)} bytes is over the limit of {MAX_VALUE} bytes "
                                          "per value")
    return int(text)


async def _linger(writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> None:
    """After an error answer to a request whose body was not read: take (and drop) what the client still
    sends, briefly, so that closing does not reset the connection before the client reads the answer."""
    try:
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(LINGER):
            for _ in range(MAX_VALUE // 65536 + 2):
                if not await reader.read(65536):
                    break
    except (OSError, TimeoutError):
        pass


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed run's TIME_WAIT, not a listener
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class JobStore:
    """Serves the store on (host, port) in a background thread until `stop()`. Binds at once (an OSError
    if the port is taken). `secret` is what every request must carry; None: a random one (`.secret`)."""

    def __init__(self, host: str, port: int, secret: str | None = None, *, max_total: int = MAX_TOTAL,
                 max_keys: int = MAX_KEYS, max_connections: int | None = None, timeout: float = REQUEST_TIMEOUT):
        self.secret = secret or secrets.token_hex(32)
        self._sock = _listen(host, port)
        self._address: tuple[str, int] = self._sock.getsockname()[:2]
        self._values = _Values(max_total, max_keys)
        self._protocol = _Protocol(self.secret, self.port, self._values, max_connections or _connection_cap(),
                                   timeout)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=f"job-store-{self.port}", daemon=True)
        self._ready = threading.Event()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._sock.setblocking(False)
        self._loop.add_reader(self._sock.fileno(), self._accept)
        self._ready.set()
        self._loop.run_forever()
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._protocol.closing = True  # a connection accepted but not yet served ends at once
        for writer in list(self._protocol.open):
            writer.transport.abort()
        tasks = asyncio.all_tasks(self._loop)
        if tasks:
            self._loop.run_until_complete(asyncio.wait(tasks, timeout=self._protocol.timeout + 1))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def _accept(self) -> None:
        """Takes at most ACCEPT_BATCH waiting connections; the others wait in the backlog. The loop reads
        what the taken ones sent before it takes more, so a burst of a flood's connections cannot push a
        rank's out (the oldest go first) before its request is read."""
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:  # out of file descriptors: make room, and look again shortly
                self._protocol.out_of_files(e)
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(0.05, self._loop.add_reader, self._sock.fileno(), self._accept)
                return
            conn.setblocking(False)
            self._loop.create_task(self._protocol.accepted(conn))

    def start(self) -> "JobStore":
        self._thread.start()
        if not self._ready.wait(timeout=10):
            raise OSError(f"the job store on port {self.port} did not start serving within 10s")
        return self

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) it listens on."""
        return self._address

    @property
    def port(self) -> int:
        return self._address[1]

    @property
    def refused(self) -> int:
        """Requests refused for a missing or wrong secret."""
        return self._protocol.refused

    @property
    def timed_out(self) -> int:
        """Connections cut at the time limit (a slow or stalled client)."""
        return self._protocol.timed_out

    @property
    def peak_connections(self) -> int:
        return self._protocol.peak

    def ranks_joined(self) -> set[int]:
        return self._values.ranks_joined()

    def get(self, scope: str, key: str) -> bytes | None:
        return self._values.get((scope, key))

    def put(self, scope: str, key: str, value: bytes) -> None:
        """Writes a key as a worker's PUT would (the agent's own requests, e.g. a preemption), past the
        store's limits: a job that filled its store can still be asked to stop."""
        self._values.put((scope, key), value, bounded=False)

    def key_count(self) -> int:
        """Keys held (what collectives leave behind is bounded). Not __len__: an empty store must not be falsy."""
        return self._values.count()[0]

    def stored_bytes(self) -> int:
        return self._values.count()[1]

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        else:
            self._sock.close()

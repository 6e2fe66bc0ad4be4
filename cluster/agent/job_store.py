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

import os
import resource
import secrets
import select
import socket
import threading
from typing import TYPE_CHECKING

from cluster.agent.job_store_values import COLLECTIVES_SCOPE, MAX_VALUE, StoreValues

if TYPE_CHECKING:
    import asyncio

    from cluster.agent.job_store_http import StoreProtocol

__all__ = ["COLLECTIVES_SCOPE", "MAX_VALUE", "JobStore"]

MAX_TOTAL = 64 << 20  # bytes of keys and values a job's store holds at once
MAX_KEYS = 65536  # keys held at once (Gloo writes a few per rank; collectives delete what was read)
MAX_CONNECTIONS = 2048  # open at once (fewer when the agent may open few files: a quarter of its limit)
REQUEST_TIMEOUT = 5.0  # seconds a connection has to send its request and take the answer
BACKLOG = 4096  # connections the kernel queues before the loop accepts them (capped by somaxconn)
STOP_WAIT = 10.0  # seconds stop() waits for the loop to come up, and then to end
ACCEPT_BATCH = 16  # connections taken per turn of the loop: what they sent is read before more are taken


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
    """Serves the store on (host, port) in a background thread until `stop()`. Binds and listens at once
    (an OSError if the port is taken); `start()` returns at once. The thread waits for the first connection
    before it brings up its loop (asyncio and the HTTP side: 30-45 ms of imports), so a run whose workers
    never use the store (no tfdist.init(), no Horovod) never pays for it, and one that does pays beside its
    workers' start, not before it (issue 31); connections wait in the listen backlog meanwhile.
    `secret` is what every request must carry; None: a random one (`.secret`)."""

    def __init__(self, host: str, port: int, secret: str | None = None, *, max_total: int = MAX_TOTAL,
                 max_keys: int = MAX_KEYS, max_connections: int | None = None, timeout: float = REQUEST_TIMEOUT):
        self.secret = secret or secrets.token_hex(32)
        self._sock = _listen(host, port)
        self._address: tuple[str, int] = self._sock.getsockname()[:2]
        self._values = StoreValues(max_total, max_keys)
        self._limits = (max_connections or _connection_cap(), timeout)
        self._protocol: StoreProtocol | None = None  # made by the thread at the first connection
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_read, self._wake_write = os.pipe()  # stop() wakes a thread still waiting for a connection
        self._stopping = False
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name=f"job-store-{self.port}", daemon=True)
        self._ready = threading.Event()  # the loop exists, or the thread ended without one

    def _first_connection(self) -> bool:
        """Waits until someone connects (True) or stop() is called (False)."""
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while not self._stopping:
            if any(fd == self._sock.fileno() for fd, _ in poller.poll()):
                return not self._stopping
        return False

    def _serve(self) -> None:
        try:
            if not self._first_connection():
                self._sock.close()
                return
            import asyncio

            from cluster.agent.job_store_http import StoreProtocol

            self._protocol = StoreProtocol(self.secret, self.port, self._values, *self._limits)
            self._loop = loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._sock.setblocking(False)
            loop.add_reader(self._sock.fileno(), self._accept)
        except BaseException:
            self._sock.close()
            raise
        finally:
            self._ready.set()
        loop.run_forever()
        loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._protocol.closing = True  # a connection accepted but not yet served ends at once
        for writer in list(self._protocol.open):
            writer.transport.abort()
        tasks = asyncio.all_tasks(loop)
        if tasks:  # their connections are gone: each ends at its next read or write
            loop.run_until_complete(asyncio.wait(tasks, timeout=2))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def _accept(self) -> None:
        """Takes at most ACCEPT_BATCH waiting connections; the others wait in the backlog. The loop reads
        what the taken ones sent before it takes more, so a burst of a flood's connections cannot push a
        rank's out (the oldest go first) before its request is read."""
        assert self._loop is not None and self._protocol is not None  # called by the loop
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
        return self._protocol.refused if self._protocol else 0

    @property
    def timed_out(self) -> int:
        """Connections cut at the time limit (a slow or stalled client)."""
        return self._protocol.timed_out if self._protocol else 0

    @property
    def evicted(self) -> int:
        """Connections closed to make room (past the connection cap, the oldest goes)."""
        return self._protocol.evicted if self._protocol else 0

    @property
    def peak_connections(self) -> int:
        return self._protocol.peak if self._protocol else 0

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
        """Closes the port and every connection; its keys are gone with it. Once: a second call does nothing
        (the wake pipe's numbers may belong to another file by then)."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            if self._thread.ident is None:  # never started
                self._sock.close()
                return
            self._stopping = True
            os.write(self._wake_write, b"x")
            if not self._ready.wait(timeout=STOP_WAIT):  # never seen; the port closes, so its loop cannot serve
                self._sock.close()
                return
            if self._loop is not None and self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STOP_WAIT)
        finally:
            os.close(self._wake_read)
            os.close(self._wake_write)

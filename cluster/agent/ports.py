"""Port leases that never collide between tfdist launches on one machine.

TensorFlow's gRPC server cannot share a port, so a port cannot be held
open for it. Instead: ports are taken from a range below the kernel's
ephemeral range (so other programs' `bind(0)` and outgoing connections do
not land on them), each leased port is held with an flock in a per-user
directory (private, this machine's: `lease_dir`) for as long as the job runs (so other tfdist launches skip it),
and each is checked free with a test bind. Before a job starts, its nodes
probe each other's leased ports (`probe`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import threading
import time
from typing import Callable

from cluster.shared.user_dirs import machine_dir
from cluster.shared.work import PROBE_TIMEOUT, ProbeFailure, ProbeTask
from tfdist.errors import UnsafePathError, UserError
from tfdist.private_files import open_private

log = logging.getLogger("tfdist.agent")
PORT_RANGE_ENV = "TFDIST_PORT_RANGE"  # "LOW-HIGH", inclusive


class PortError(UserError, RuntimeError):
    pass


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def lease_range(env: dict | None = None) -> tuple[int, int]:
    """The ports tfdist may lease: TFDIST_PORT_RANGE, else just below the ephemeral range."""
    raw = (env if env is not None else os.environ).get(PORT_RANGE_ENV)
    if raw:
        try:
            low, high = (int(x) for x in raw.split("-"))
        except ValueError:
            raise PortError(f"{PORT_RANGE_ENV}={raw!r} is not LOW-HIGH, e.g. 20000-29999") from None
        if not 1024 <= low <= high <= 65535:
            raise PortError(f"{PORT_RANGE_ENV}={raw!r} must satisfy 1024 <= LOW <= HIGH <= 65535")
        return low, high
    eph_low, eph_high = ephemeral_range()
    if eph_low > 12000:
        return max(1024, eph_low - 10000), eph_low - 1
    return eph_high + 1, 65535


def lease_dir() -> str:
    """This user's directory of lock files on this machine (cluster/shared/user_dirs.py: under a directory
    only the user can write to, so no other user can make it first): created 0700, or checked to be the
    user's own and private (UnsafePathError naming it). Re-created if something removed it."""
    return machine_dir("ports")


def _listen(port: int) -> socket.socket | None:
    """A socket bound to `port` on every address and listening, or None if the port is taken.
    Listening lets the job's other nodes check, before TensorFlow starts, that they reach it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
    try:
        s.bind(("0.0.0.0", port))
        s.listen(64)
    except OSError:
        s.close()
        return None
    return s


class PortLease:
    """Ports held for one job: an flock per port (machine-wide, across tfdist processes) and, until
    `stop_listening()`, a listening socket on each. `release()` (or leaving the `with`) frees them."""

    def __init__(self):
        self.ports: list[int] = []
        self._fds: list[int] = []
        self._sockets: list[socket.socket] = []

    def _try_add(self, port: int, lock_dir: str) -> bool:
        fd = open_private(os.path.join(lock_dir, f"{port}.lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        listener = _listen(port)
        if listener is None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return False
        self.ports.append(port)
        self._fds.append(fd)
        self._sockets.append(listener)
        return True

    def stop_listening(self) -> None:
        """Frees the ports for the workers (the flocks stay until `release()`)."""
        for s in self._sockets:
            s.close()
        self._sockets.clear()

    def release(self) -> None:
        self.stop_listening()
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def __enter__(self) -> "PortLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lease_exact(ports: list[int]) -> tuple[PortLease, list[int]]:
    """Leases exactly these ports where possible; returns the lease and the ports that were busy
    (held by another tfdist job on this machine, or bound by anything)."""
    lock_dir = lease_dir()  # refused before any lock is tried: never "busy" for a directory that is not ours
    lease = PortLease()
    try:
        busy = [p for p in ports if not lease._try_add(p, lock_dir)]
    except BaseException:
        lease.release()
        raise
    return lease, busy


def lease_for_job(job_id: str, ports: list[int]) -> tuple[PortLease, list[int]]:
    """lease_exact for the agent's loop, which checked `lease_dir()` when it started: a lease directory
    made unsafe or unusable since is one error line in the agent's log and every port reported busy, never
    an exception that would end the loop."""
    try:
        return lease_exact(ports)
    except (UnsafePathError, OSError) as e:  # OSError: the directory went away under the lease, a full disk
        log.error("job %s: cannot lease ports: %s", job_id, e)
        return PortLease(), list(ports)


NAME_WAIT = 90.0  # seconds a peer's name may take to resolve (a cluster's DNS serves a new pod's name late)


def connect_error(address: str, port: int, timeout: float) -> tuple[str, bool]:
    """('', False) if a TCP connection to address:port opens within `timeout`, else what went wrong and
    whether it was the name that did not resolve (yet)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return "", False
    except socket.gaierror as e:
        return f"its name does not resolve ({e.strerror or e})", True
    except socket.timeout:
        return f"no answer within {timeout:g}s (packets dropped: a firewall?)", False
    except OSError as e:
        return e.strerror or str(e), False


def probe(task: ProbeTask, connect=connect_error, clock=time.monotonic, sleep=time.sleep) -> tuple[ProbeFailure, ...]:
    """Connects to every peer's leased port of a job; the ones that did not answer, with why. A name that
    does not resolve is asked again (backing off) for NAME_WAIT seconds: a Kubernetes pod's DNS record is
    served some seconds after the pod runs, and a negative answer may be cached meanwhile."""
    failures, deadline = [], clock() + NAME_WAIT
    for peer, address, port in task.targets:
        pause = 0.25
        while True:
            error, unresolved = connect(address, port, task.timeout or PROBE_TIMEOUT)
            if not unresolved or clock() + pause > deadline:
                break
            sleep(pause)
            pause = min(pause * 2, 5.0)
        if error:
            failures.append(ProbeFailure(peer, address, port, error + (f" after {NAME_WAIT:g}s" if unresolved else "")))
    return tuple(failures)


class Prober:
    """Probes a job's peers in the background, one probe per job at a time; the results wait for the
    next heartbeat (`take`), and `on_done` is called as each probe ends (heartbeat now)."""

    def __init__(self, on_done: Callable[[], None]):
        self.on_done = on_done
        self._lock = threading.Lock()
        self._probing: set[str] = set()
        self._results: dict[str, tuple[ProbeFailure, ...]] = {}

    def start(self, task: ProbeTask) -> None:
        with self._lock:
            if task.job_id in self._probing:
                return
            self._probing.add(task.job_id)
        threading.Thread(target=self._probe, args=(task,), daemon=True).start()

    def take(self) -> dict[str, tuple[ProbeFailure, ...]]:
        with self._lock:
            results, self._results = self._results, {}
        return results

    def _probe(self, task: ProbeTask) -> None:
        failures = probe(task)
        if failures:
            log.warning("job %s: cannot reach %s", task.job_id,
                        ", ".join(f"{f.peer} at {f.address}:{f.port} ({f.error})" for f in failures))
        with self._lock:
            self._probing.discard(task.job_id)
            self._results[task.job_id] = failures
        self.on_done()

"""Synchronized preemption: every rank stops after the same step, saves, and exits 0.

Who asks: `tfdist preempt ID` (the coordinator has the agent serving the job's store write the
request there), SIGTERM to `tfdist launch` (it asks the coordinator the same way), or SIGTERM to
any worker from a cluster manager (Slurm, Kubernetes): the worker's handler writes the request.

How ranks agree: every rank calls `check(step)` at each step boundary; it reads a local flag, so
it costs nothing in the common case. A background thread per rank polls the job's store. The
chief, at its first boundary after a request, picks `stop_at = step + margin` and writes it; every
rank's poller acknowledges it; the chief waits for every acknowledgement before it starts its
next step. No rank can finish a step the chief has not begun (its all-reduce needs the chief), and
`margin` covers the steps a rank may run ahead without one (1; k with aggregation_frequency k).
So every rank knows `stop_at` before it can pass it, and all stop at the same boundary.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from tfdist import envvars, store_scopes
from tfdist.collectives import StoreLimitError, StoreSecretError, store_request
from tfdist.errors import UnavailableError
from tfdist.metrics import PREEMPTED_RECORD, PREEMPTIBLE_RECORD, report_record
from tfdist.modes import mode_of_env

log = logging.getLogger("tfdist")

SCOPE = store_scopes.PREEMPT
POLL_INTERVAL = 0.2  # seconds between a rank's looks at the store
ACK_TIMEOUT = 120.0  # seconds the chief waits for every rank to learn the stop step


class Preemption:
    def __init__(self, store: str | None, rank: int, size: int, margin: int = 1, peers: bool = True,
                 ack_timeout: float = ACK_TIMEOUT):
        """`peers`: other ranks run the training loop too (False where the mode's chief alone runs the
        script, as in ps mode)."""
        self.store, self.rank, self.size, self.margin = store, rank, size, max(1, margin)
        self.peers = peers and size > 1
        self.ack_timeout = ack_timeout
        self.stop_at: int | None = None  # the agreed step, once known
        self.stopped_at: int | None = None  # the step check() first returned True at
        self._requested = threading.Event()  # someone asked (the store's request key, or our own signal)
        self._signalled = False
        self._announced = False
        self._armed = False
        self._previous_handler = signal.SIG_DFL
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ---------------------------------------------------------------- the training loop's side
    def check(self, step: int) -> bool:
        """True from the step every rank stops at: save, then exit 0. Call it on every rank at every
        step boundary with the global step just finished."""
        if self.stopped_at is not None:
            return True
        if not self._armed:
            self._arm()
        if not self._requested.is_set() and self.stop_at is None:
            return False
        if not self.peers:
            self.stopped_at = step
            return True
        if self.rank == 0 and self.stop_at is None:
            self._decide(step)
        if self.stop_at is not None and step >= self.stop_at:
            self.stopped_at = step
            return True
        return False

    def _decide(self, step: int) -> None:
        stop_at = step + self.margin
        self._put("stop_at", str(stop_at).encode())
        deadline = time.monotonic() + self.ack_timeout
        waiting = set(range(1, self.size))
        while waiting:
            waiting = {r for r in waiting if self._get(f"ack-{r}") is None}
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise UnavailableError(f"preemption: rank(s) {', '.join(map(str, sorted(waiting)))} did not learn "
                                       f"the stop step ({stop_at}) within {self.ack_timeout:g}s")
            time.sleep(0.02)
        self.stop_at = stop_at
        print(f"tfdist: preemption requested: every rank stops after step {stop_at}, saves and exits",
              file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- signals and the poller
    def _arm(self) -> None:
        """On the first check: take over SIGTERM (while a loop checks, SIGTERM means "preempt") and
        start watching the store."""
        self._armed = True
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.store:
            self._thread = threading.Thread(target=self._poll, name="tfdist-preemption", daemon=True)
            self._thread.start()

    def disarm(self) -> None:
        """The loop ended: SIGTERM does what it did before, the poller stops."""
        if self._armed and threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_handler)
        self._stop.set()
        self._armed = False

    def _on_sigterm(self, signum, frame) -> None:
        if self._signalled:  # the second one: stop now
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self._signalled = True
        self._requested.set()
        os.write(2, f"tfdist: rank {self.rank} got SIGTERM: every rank stops at a common step, saves and exits "
                    "(send SIGTERM again to stop at once)\n".encode())

    def _poll(self) -> None:
        told = False
        while not self._stop.wait(POLL_INTERVAL):
            try:
                if self._signalled and not told:
                    self._put("request", f"SIGTERM to rank {self.rank}".encode())
                    told = True
                if not self._requested.is_set() and self._get("request") is not None:
                    self._requested.set()
                if self.rank != 0 and self.stop_at is None:
                    value = self._get("stop_at")
                    if value is not None:
                        self.stop_at = int(value)
                        self._put(f"ack-{self.rank}", b"1")
            except (StoreSecretError, StoreLimitError) as e:  # will not change: say so once, stop looking
                log.warning("preemption: rank %d cannot watch the job's store: %s", self.rank, e)
                return
            except (UnavailableError, ValueError) as e:
                log.debug("preemption poller: %s", e)
            if self.stop_at is not None and (self.rank == 0 or told or not self._signalled):
                return

    def _get(self, key: str) -> bytes | None:
        status, data = store_request(self.store, "GET", f"/{SCOPE}/{key}")
        return data if status == 200 else None

    def _put(self, key: str, value: bytes) -> None:
        store_request(self.store, "PUT", f"/{SCOPE}/{key}", value)


_current: Preemption | None = None


def current() -> Preemption:
    """This process's preemption watcher (one per process), built from the launcher's environment."""
    global _current
    if _current is None:
        env = os.environ
        _current = Preemption(env.get(envvars.STORE), int(env.get(envvars.RANK, "0")),
                              int(env.get(envvars.SIZE, "1")),
                              margin=int(env.get(envvars.AGGREGATION_FREQUENCY, "1") or 1),
                              peers=mode_of_env(env).every_rank_runs_script)
    return _current


def stop_here(step: int) -> bool:
    """`current().check(step)`; the first time it is True the chief records the step with the job, so
    that the coordinator pauses the job (instead of calling it done) once every rank exited 0."""
    watcher = current()
    first = watcher.stopped_at is None
    if not watcher._armed and watcher.rank == 0:  # from now on `tfdist preempt` can be honoured
        report_record(PREEMPTIBLE_RECORD, step, _attempt())
    if not watcher.check(step):
        return False
    if first and watcher.rank == 0:
        report_record(PREEMPTED_RECORD, step, _attempt())
    return True


def _attempt() -> int:
    return int(os.environ.get(envvars.ATTEMPT, "0") or 0)

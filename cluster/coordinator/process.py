"""The coordinator without its network front: the store, the core, the engine and the watchdog loop (each
second: the engine's own watch, where the agents engine declares silent agents lost, then the jobs'
deadlines).

`tfdist coordinator` wraps one in its gRPC server (server.py) at once. A local launch starts one alone,
submits and follows in-process (in_process.py), and serves it over gRPC for its user's other terminals
from a thread beside the job, so neither gRPC nor TLS is on the way to the workers' start."""

from __future__ import annotations

import logging
import threading
import time

from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.engine import Engine
from cluster.coordinator.heap import HeapThaw
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.store.retention import Retention
from cluster.coordinator.values import Settings
from tfdist.errors import TfdistError

log = logging.getLogger("tfdist.coordinator")


STATE_FILE = "coordinator.sqlite"  # in the coordinator's state dir


class CoordinatorProcess:
    def __init__(self, state_dir: str, settings: Settings = Settings(), engine: Engine | None = None):
        """`engine`: where jobs run besides the agents that register (engine.py); None: agents alone."""
        self.store = SqliteStore(f"{state_dir}/{STATE_FILE}" if state_dir != ":memory:" else ":memory:",
                                 retention=Retention(settings.retention_jobs, settings.retention_days))
        self.core = CoordinatorCore(self.store, settings, now=time.time(),
                                    lock=engine.event_lock() if engine is not None else None)
        self.engine = engine
        self._stop = threading.Event()
        self._checker = threading.Thread(target=self._check_loop, daemon=True)
        self.heap = HeapThaw()  # what the daemon's freeze_after_full_collections froze: cycles among it, now and then

    def start(self) -> "CoordinatorProcess":
        """Starts the watchdog loop and attaches the engine (once: a second call does nothing)."""
        if self._checker.is_alive() or self._stop.is_set():
            return self
        self._checker.start()
        if self.engine is not None:
            try:
                self.core.attach_engine(self.engine)
            except BaseException:  # its directories another user's, say: leave nothing running
                self.engine = None
                self.close()
                raise
        return self

    def _check_loop(self) -> None:
        interval = min(1.0, self.core.settings.lost_after / 4)
        while not self._stop.wait(interval):
            self.heap.tick()
            now = time.time()
            engine = self.engine
            # The engine's first: a node it finds lost names the root cause before a deadline would.
            for check, what in ((engine.tick if engine is not None else None, "engine's watch"),
                                (self.core.check_deadlines, "deadline check")):
                if check is None:
                    continue
                try:
                    check(now)
                except TfdistError as e:  # e.g. the disk is full: one line, the next round retries
                    log.error("%s failed: %s", what, e)
                except Exception:  # keep the daemon alive; the next round retries
                    log.exception("%s failed", what)

    def close_engine(self, timeout: float = 10.0) -> None:
        """Stops the engine's workers (their grace, then SIGKILL, within `timeout`); their last exits still
        reach the store. First of a stop, before the front goes."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close(timeout)

    def close(self, engine_timeout: float = 10.0) -> None:
        self.close_engine(engine_timeout)
        self._stop.set()
        self.store.close()

"""Retention: which finished jobs the coordinator keeps, and the thread that prunes the rest.

The rule: a finished job (SUCCEEDED, FAILED, CANCELED) is kept while it is among the newest `keep_jobs`
finished jobs (by job number) AND it ended within `keep_days`; past either, it goes with everything stored
about it (events, exits, checkpoints records, metrics, logs). 0 turns a limit off. Queued, running and
paused jobs are never pruned, nor a finished job that still holds a node. Job numbers are never reused.

Pruning runs off the hot path: a thread of its own, in bounded batches (`batch_jobs` jobs, then at most
`batch_rows` log and metric rows, per transaction), letting the coordinator's events in between.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from cluster.coordinator.store.base import StateStore

log = logging.getLogger("tfdist.coordinator")
DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class Retention:
    keep_jobs: int = 10_000  # the newest this many finished jobs (0: no count limit)
    keep_days: float = 30.0  # that ended within this many days (0: no age limit)
    every: float = 60.0  # seconds between pruning rounds
    batch_jobs: int = 100  # jobs per transaction
    batch_rows: int = 5_000  # log and metric rows per transaction
    pause: float = 0.01  # seconds between two batches: the coordinator's events go first

    @property
    def keep_seconds(self) -> float:
        return self.keep_days * DAY


class Pruner:
    """Applies `retention` to `store` every `retention.every` seconds on its own thread (start/stop), or
    once (`prune`)."""

    def __init__(self, store: StateStore, retention: Retention, clock=time.time):
        self.store, self.retention, self.clock = store, retention, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tfdist-pruner", daemon=True)

    def prune(self) -> tuple[int, int]:
        """One round: every job the rule lets go, in batches. Returns (jobs pruned, rows of output purged)."""
        r, jobs, rows = self.retention, 0, 0
        while not self._stop.is_set():
            done = len(self.store.prune_finished(self.clock(), r.keep_jobs, r.keep_seconds, r.batch_jobs))
            jobs += done
            if done < r.batch_jobs:
                break
            self._stop.wait(r.pause)
        while not self._stop.is_set() and (purged := self.store.purge_output(r.batch_rows)):
            rows += purged
            self._stop.wait(r.pause)
        return jobs, rows

    def _loop(self) -> None:
        while True:
            try:
                jobs, rows = self.prune()
                if jobs:
                    log.info("retention: pruned %d finished jobs (%d rows of their output)", jobs, rows)
            except Exception:  # a full disk, a locked file: the next round tries again
                log.exception("retention: pruning failed; trying again in %.0fs", self.retention.every)
            if self._stop.wait(self.retention.every):
                return

    def start(self) -> "Pruner":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

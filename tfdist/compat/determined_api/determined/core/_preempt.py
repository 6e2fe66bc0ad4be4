"""`core_context.preempt.should_preempt()`: tfdist's preemption (`tfdist preempt`, a searcher pausing a trial,
SIGTERM from a drain or a cluster manager) as Determined's scripts ask for it. Determined's default mode,
WorkersAskChief, is a collective: every rank calls it at the same points and gets the chief's answer, so they
all stop together (tfdist's step-margin agreement is not needed). The chief records the stop with the job, so
that the coordinator pauses the job when its processes exit 0 instead of calling it done."""

from __future__ import annotations

import enum
import os
from typing import Callable

from tfdist import envvars
from tfdist.metrics import PREEMPTED_RECORD, PREEMPTIBLE_RECORD, report_record
from tfdist.collectives import store_request
from tfdist.preemption import SCOPE, Preemption

FINISHED_KEY = "determined-finished"  # the chief's "the trial reached its searcher's length", for WorkersAskMaster


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    def __init__(self, distributed, steps: Callable[[], int],
                 preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
                 finished: Callable[[], bool] = lambda: False) -> None:
        """`finished`: the trial reached its searcher's max_time (Determined's searcher then stops it: the run
        ends as completed, not paused)."""
        self._dist, self._steps, self._mode, self._finished = distributed, steps, preempt_mode, finished
        # One rank's view of the job's request (the store's key, or SIGTERM to this process, which it tells the
        # store of): peers=False, the collective below is the agreement.
        self._watch = Preemption(os.environ.get(envvars.STORE), distributed.rank, 1, peers=False)
        self._recorded = False
        self._armed = False
        self._told = False  # the chief wrote FINISHED_KEY

    def start(self) -> None:
        """Nothing until the script first asks (Determined's init calls it)."""

    def _arm(self) -> None:
        """At the first question: from now on the job can be paused (the chief says so to the coordinator; a
        searcher stops, rather than pauses, a trial whose script never asks), and SIGTERM to any rank means
        "preempt" (its watcher tells the job's store, where the chief sees it)."""
        self._armed = True
        self._watch.check(self._steps())
        if self._dist.rank == 0:
            report_record(PREEMPTIBLE_RECORD, self._steps(), _attempt())

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._armed:
            self._arm()
        chief = self._dist.rank == 0
        if self._mode == PreemptMode.WorkersAskChief:
            answer = [self._asked(), self._finished()] if chief else None
            asked, finished = self._dist.broadcast(answer)
        else:  # each rank asks alone: the chief's "finished" reaches the others through the job's store
            asked, finished = self._asked(), self._finished_told(chief)
        if asked and auto_ack:
            self.acknowledge_preemption_signal()
        return bool(asked or finished)

    def acknowledge_preemption_signal(self) -> None:
        if self._dist.rank == 0 and not self._recorded:
            report_record(PREEMPTED_RECORD, self._steps(), _attempt())
            self._recorded = True

    def close(self) -> None:
        self._watch.disarm()

    def _finished_told(self, chief: bool) -> bool:
        store = os.environ.get(envvars.STORE)
        if chief:
            finished = self._finished()
            if finished and store and not self._told:
                store_request(store, "PUT", f"/{SCOPE}/{FINISHED_KEY}", b"1")
                self._told = True
            return finished
        return bool(store) and store_request(store, "GET", f"/{SCOPE}/{FINISHED_KEY}")[0] == 200

    def _asked(self) -> bool:
        return self._watch.check(self._steps())


class DummyPreemptContext(PreemptContext):
    pass


def _attempt() -> int:
    return int(os.environ.get(envvars.ATTEMPT, "0") or 0)

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
from tfdist.preemption import Preemption


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
        else:
            asked, finished = self._asked(), chief and self._finished()
        if asked and auto_ack:
            self.acknowledge_preemption_signal()
        return bool(asked or finished)

    def acknowledge_preemption_signal(self) -> None:
        if self._dist.rank == 0 and not self._recorded:
            report_record(PREEMPTED_RECORD, self._steps(), _attempt())
            self._recorded = True

    def close(self) -> None:
        self._watch.disarm()

    def _asked(self) -> bool:
        return self._watch.check(self._steps())


class DummyPreemptContext(PreemptContext):
    pass


def _attempt() -> int:
    return int(os.environ.get(envvars.ATTEMPT, "0") or 0)

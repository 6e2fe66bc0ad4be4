"""The executor of a StartPlan on this node: serves the job's store, starts the gang, supervises it and
returns a RunResult, then removes what the run left (its store, its files). In torch elastic's terms:
`_start_workers` + `_monitor_workers` for one node's share of a job."""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import shutil
import threading
import time
from typing import Callable, Mapping

from cluster.agent.gang import Gang, GangResult, OutputSink, WorkerFailure
from cluster.agent.job_store import JobStore
from cluster.agent.start_plan import COMMAND_NOT_RUN, StartPlan, every_rank_failed
from cluster.shared.model import WorkerExit
from cluster.shared.work import RankProgress, RunningJob
from tfdist import envvars
from tfdist.errors import UnsafePathError
from tfdist.store_scopes import PREEMPT as PREEMPT_SCOPE
from tfdist.private_files import open_private

log = logging.getLogger("tfdist.agent")
STORE_KEPT = 600.0  # seconds a shared store outlives this node's workers at most, when the job is not ended
STORE_PATIENCE = 3.0  # seconds a store's port may still be in use (the lease's test socket just closed)


class RunState(str, enum.Enum):
    SUCCEEDED = "SUCCEEDED"  # every worker exited 0
    FAILED = "FAILED"  # a worker failed (the first failure is the root cause)
    NOT_STARTED = "NOT_STARTED"  # the run could not start here: every rank was reported failed


@dataclasses.dataclass(frozen=True)
class RunResult:
    job_id: str
    attempt: int
    state: RunState
    exit_codes: Mapping[int, int]
    failure: WorkerFailure | None = None  # the first failure of a run that started

    @classmethod
    def of_gang(cls, plan: StartPlan, result: GangResult) -> "RunResult":
        return cls(plan.job_id, plan.attempt, RunState.SUCCEEDED if result.ok else RunState.FAILED,
                   dict(result.exit_codes), result.failure)


ExitSink = Callable[[str, WorkerExit], None]  # (job id, the exit)


class JobRun:
    """One run of a job on this node. `on_exit` gets each worker's exit as it happens (and every rank's
    when the run could not start); `on_line` each output line."""

    def __init__(self, plan: StartPlan, on_line: OutputSink, on_exit: ExitSink, store_patience: float = STORE_PATIENCE):
        self.plan = plan
        self.store_patience = store_patience
        self.on_exit = on_exit
        self.store: JobStore | None = None
        self._released = threading.Event()  # the job's end reached this node (or it stops): the store may go
        self.workers_ended = False  # its workers are gone (the run may still keep the job's store)
        self.gang = Gang(plan.workers, on_line, cwd=plan.cwd, failure_grace=plan.failure_grace,
                         on_exit=self._worker_exited)

    @property
    def job_id(self) -> str:
        return self.plan.job_id

    def serve_store(self) -> tuple[WorkerExit, ...]:
        """Binds the job's store where the plan says (`run` starts serving it); () if bound (or there is
        none), else every rank's failure."""
        if self.plan.store is None:
            return ()
        host, port = self.plan.store
        try:
            self.store = _serve_store(host, port, self.plan.store_secret, self.store_patience)
        except OSError as e:
            log.warning("job %s: cannot serve its store on %s:%d: %s", self.job_id, host, port, e)
            return every_rank_failed(self.plan.ranks, self.plan.agent, self.plan.attempt,
                                     [f"{self.plan.agent}: cannot serve the job's store on {host}:{port}: {e.strerror}"],
                                     exit_code=1)
        return ()

    def run(self, started: Callable[[], None] = lambda: None) -> RunResult:
        """Starts the workers, calls `started` (they have process groups now) and waits for them. Call
        from a thread that lives until the run ends: the workers die with it (PDEATHSIG)."""
        try:
            self.gang.start()
            if self.store is not None:  # bound already (its address is in the workers' environment); its
                self.store.start()  # loop comes up beside the workers, who queue in its backlog meanwhile
            started()
            result = RunResult.of_gang(self.plan, self.gang.run())
            self.workers_ended = True
            return result
        except Exception as e:  # could not even start: report every rank as failed
            log.error("job %s: %s", self.job_id, e)
            for exit_ in every_rank_failed(self.plan.ranks, self.plan.agent, self.plan.attempt, [str(e)]):
                self.on_exit(self.job_id, exit_)
            self.workers_ended = True
            return RunResult(self.job_id, self.plan.attempt, RunState.NOT_STARTED,
                             {rank: COMMAND_NOT_RUN for rank in self.plan.ranks})

    def keep_store(self, result: "RunResult", bound: float = STORE_KEPT) -> None:
        """After a successful run whose store other nodes' workers use: waits until `release()` (the job ended
        everywhere, or the agent stops), at most `bound` seconds, so that a slower rank elsewhere still reads
        the job's last collective (its store closing with this node's workers failed it: connection refused)."""
        if result.state != RunState.SUCCEEDED or not self.plan.store_shared or self.store is None:
            return
        log.info("job %s: this node's workers ended; its store stays until the job ends on every node", self.job_id)
        if not self._released.wait(bound):
            log.warning("job %s: the coordinator did not end the job within %gs of this node's workers ending; its "
                        "store closes (a worker elsewhere still using it fails)", self.job_id, bound)

    def release(self) -> None:
        """The job ended (or this node stops): a store kept by `keep_store` closes now."""
        self._released.set()

    def close(self) -> None:
        """After the run: its store stops, its files go."""
        if self.store is not None:
            self.store.stop()
        shutil.rmtree(self.plan.job_dir, ignore_errors=True)

    # ---------------------------------------------------------------- while it runs
    def running_job(self, now: float) -> RunningJob:
        joined = set(self.gang.joined_ranks()) | (self.store.ranks_joined() if self.store else set())
        return RunningJob(self.job_id, self.plan.ranks, tuple(sorted(joined)), self.progress(now), self.plan.attempt)

    def progress(self, now: float) -> tuple[RankProgress, ...]:
        """The ranks that report progress (tfdist.report_progress): last step, seconds since."""
        found = []
        for w in self.plan.workers:
            path = w.env.get(envvars.PROGRESS_FILE)
            try:
                with os.fdopen(open_private(path), "rb") as f:  # a symlink there is not followed
                    step = int(f.read(64).split()[0])
                    age = max(0.0, now - os.fstat(f.fileno()).st_mtime)
                found.append(RankProgress(w.rank, step, age))
            except (OSError, UnsafePathError, ValueError, IndexError, TypeError):
                continue  # not reporting (yet), or caught mid-write: the next heartbeat reads it
        return tuple(found)

    def request_preemption(self) -> bool:
        """Puts the preemption request in the job's store (its workers stop at a common step); False if
        this node serves no store or the request is there already."""
        if self.store is None or self.store.get(PREEMPT_SCOPE, "request") is not None:
            return False
        self.store.put(PREEMPT_SCOPE, "request", b"tfdist preempt")
        return True

    def _worker_exited(self, rank: int, code: int, last_lines: tuple) -> None:
        self.on_exit(self.job_id, WorkerExit(rank=rank, agent=self.plan.agent, exit_code=code, last_lines=tuple(last_lines),
                                attempt=self.plan.attempt))


def _serve_store(host: str, port: int, secret: str, patience: float) -> JobStore:
    """The job's store on its leased port, requiring the run's secret ("": none was sent, so no worker
    can reach it and each is told why). The lease's own test socket was closed just before; a bind
    that still finds the port in use is retried briefly before the job is failed."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return JobStore(host, port, secret or None)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

"""What one machine does with the work the coordinator derives for it (cluster/shared/work.py): lease a job's
ports machine-wide, start its runs (start_plan.py executed by a JobRun), carry a preemption request, dump
stacks, stop runs, and say what it runs and holds. Shared by the agent (its work comes with heartbeats over
gRPC) and the local engine (cluster/engines/local/: the same work, read in-process); how the output, exits
and metric rows travel is the caller's (`Shipping`)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import tempfile
import threading
import time
from typing import Callable, Sequence

from cluster.agent.gang import find_setpriv_early
from cluster.agent.job_run import JobRun
from cluster.agent.metrics_tail import MetricsTail
from cluster.agent.ports import PortLease, lease_dir, lease_for_job, lease_range  # noqa: F401 (lease_range: re-exported)
from cluster.agent.start_plan import node_facts, plan_start
from cluster.shared.model import Address, MetricRow, WorkerExit
from cluster.shared.work import RunningJob, StartTask, Work

log = logging.getLogger("tfdist.agent")
FINISHED_KEPT = 10_000  # runs remembered as finished (a repeated start of one is ignored)


@dataclasses.dataclass(frozen=True)
class Shipping:
    """Where a run's output goes: `line(job, rank, stream, text)`, `metric(job, row)`, `exit(job, exit)`;
    `drain(job)` returns once what the job's run produced has reached the coordinator (or gave up);
    `forget(job)` drops what is left of it."""
    line: Callable[[str, int, str, str], None]
    metric: Callable[[str, MetricRow], None]
    exit: Callable[[str, WorkerExit], None]
    drain: Callable[[str], None]
    forget: Callable[[str], None]


class NodeRuns:
    """The job runs and port leases of one machine. `changed()` is called when what it runs or holds changed
    (a run ended: tell the coordinator at once); `started(runs)` once a run's workers have process groups."""

    def __init__(self, name: str, addresses: Sequence[Address], shipping: Shipping,
                 changed: Callable[[], None] = lambda: None, started: Callable[[], None] = lambda: None):
        self.name = name
        self.addresses = tuple(addresses)
        self.shipping = shipping
        self.metrics = MetricsTail(shipping.metric, lambda job, rank, text: shipping.line(job, rank, "stderr", text))
        self._changed, self._started = changed, started
        self._lock = threading.Lock()
        self._runs: dict[str, JobRun] = {}  # job id -> its run whose workers run or are being reaped
        # (job id, attempt) of runs that ended here: a repeated start or port check of one is ignored.
        self._finished: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self._attempts: dict[str, int] = {}  # job id -> the run of it whose ports or workers this node holds
        self._port_results: dict[str, tuple[int, ...]] = {}
        self._port_leases: dict[str, PortLease] = {}  # held from the check until the job ends
        lease_dir()  # this user's lease directory: refused now (UnsafePathError) if it is not the user's own
        find_setpriv_early()

    # ---------------------------------------------------------------- what it says
    def running(self) -> tuple[RunningJob, ...]:
        now = time.time()
        with self._lock:
            return tuple(run.running_job(now) for run in self._runs.values())

    def leased(self) -> tuple[str, ...]:
        """Jobs whose ports it holds without running them yet."""
        with self._lock:
            return tuple(j for j in self._port_leases if j not in self._runs)

    def take_port_results(self) -> dict[str, tuple[int, ...]]:
        """Each port check's busy ports since the last call."""
        with self._lock:
            results, self._port_results = self._port_results, {}
        return results

    def holds_ports(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._port_leases

    def job_ids(self) -> list[str]:
        """Jobs whose workers run here (not one whose run only keeps its store for the other nodes)."""
        with self._lock:
            return [job_id for job_id, run in self._runs.items() if not run.workers_ended]

    def process_groups(self) -> dict[str, list[int]]:
        with self._lock:
            return {job_id: run.gang.process_groups() for job_id, run in self._runs.items()}

    def run_of(self, job_id: str) -> JobRun | None:
        with self._lock:
            return self._runs.get(job_id)

    # ---------------------------------------------------------------- doing the work
    def apply(self, work: Work) -> None:
        """Everything of `work` but the peer probes (the agent's: one machine has no peer)."""
        for job_id, ports in work.check_ports:
            self.check_ports(job_id, list(ports), work.attempts.get(job_id, 0))
        for task in work.start:
            self.start(task)
        for job_id in work.preempt:
            run = self.run_of(job_id)
            if run is not None and run.request_preemption():
                log.info("job %s: preemption requested; its workers stop at a common step", job_id)
        for job_id in work.dump_stacks:
            run = self.run_of(job_id)
            if run is not None:
                log.warning("job %s: the step watchdog asks for every worker's Python stacks", job_id)
                run.gang.dump_stacks()
        for job_id in work.stop_jobs:
            self.stop_job(job_id, work.stop_grace.get(job_id))

    def check_ports(self, job_id: str, ports: list[int], attempt: int = 0) -> None:
        """Leases the ports machine-wide (so no other tfdist job on this machine, with this or another
        coordinator, takes them), listens on them for the peers' probes, and notes those that are busy."""
        with self._lock:
            if job_id in self._runs or (job_id, attempt) in self._finished:
                return
            self._attempts[job_id] = attempt
            old = self._port_leases.pop(job_id, None)
            if old:
                old.release()
            lease, busy = lease_for_job(job_id, ports)
            if busy:
                lease.release()
            else:
                self._port_leases[job_id] = lease
            self._port_results[job_id] = tuple(busy)

    def start(self, task: StartTask) -> None:
        with self._lock:
            if task.job_id in self._runs or (task.job_id, task.attempt) in self._finished:
                return  # a start repeated before the coordinator heard that it runs
            self._attempts[task.job_id] = task.attempt
            lease = self._port_leases.get(task.job_id)
            plan = plan_start(task, node_facts(self.name, self.addresses),
                              tempfile.mkdtemp(prefix=f"tfdist-{task.job_id}-"))  # ready and metrics files
            run = JobRun(plan, self._line_sink(task.job_id), self._report_exit)
            exits = plan.exits
            if plan.can_start:
                if lease:
                    lease.stop_listening()  # the ports are the workers' now
                exits = run.serve_store()
                if exits and lease:
                    lease.release()
                    self._port_leases.pop(task.job_id, None)
            if exits:  # every rank failed before any started
                run.close()
                for exit_ in exits:
                    self.shipping.exit(task.job_id, exit_)
                self._forget_run(task.job_id)
                return
            self.metrics.add(task.job_id, plan.metrics_files)
            self._runs[task.job_id] = run
        log.info("starting job %s: ranks %s", task.job_id, list(plan.ranks))
        threading.Thread(target=self._run_job, args=(run,), daemon=True).start()

    def stop_job(self, job_id: str, grace: float | None = None) -> None:
        with self._lock:
            run = self._runs.get(job_id)
            lease = None if run else self._port_leases.pop(job_id, None)
        if run:
            if not run.gang.stopping:
                log.info("stopping job %s", job_id)
            run.gang.stop(grace)
            run.release()
        if lease:
            lease.release()
            with self._lock:
                self._attempts.pop(job_id, None)
            self._changed()

    def stop_all(self) -> None:
        """Every run's workers are stopped and every lease let go (the machine's daemon is stopping)."""
        with self._lock:
            runs = list(self._runs.values())
            leases = list(self._port_leases.values())
        for run in runs:
            run.gang.stop()
            run.release()
        for lease in leases:
            lease.release()

    def wait_idle(self, timeout: float) -> bool:
        """Waits up to `timeout` for every run to end; whether they did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._runs:
                    return True
            time.sleep(0.05)
        return False

    # ---------------------------------------------------------------- a run's life
    def _run_job(self, run: JobRun) -> None:
        # In this thread: the workers die with it (PDEATHSIG).
        result = run.run(started=self._started)
        log.debug("job %s (run %d) on this node: %s", run.job_id, result.attempt, result.state.value)
        self.metrics.read(final=True, only=run.job_id)  # the last rows, before the files go
        self.shipping.drain(run.job_id)
        run.keep_store(result)  # reported running meanwhile: the coordinator stops it once the job ended
        with self._lock:
            lease = self._port_leases.pop(run.job_id, None)
            if lease:
                lease.release()
            run.close()
            self.metrics.forget(run.job_id)
            self._runs.pop(run.job_id, None)
            self._forget_run(run.job_id)
        self.shipping.forget(run.job_id)
        self._started()  # the process groups it records: this run's are gone
        self._changed()  # tell the coordinator at once: the job's slots are free

    def _forget_run(self, job_id: str) -> None:
        """Under the lock: the job's run ended here; a repeated start of it is ignored."""
        self._finished[(job_id, self._attempts.pop(job_id, 0))] = None
        while len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _line_sink(self, job_id: str):
        def sink(rank: int, stream: str, line: str) -> None:
            self.shipping.line(job_id, rank, stream, line)
        return sink

    def _report_exit(self, job_id: str, exit_: WorkerExit) -> None:
        # What the worker recorded goes first: a preempted run's step must be known before its exits.
        self.metrics.read(only=job_id)
        self.shipping.exit(job_id, exit_)

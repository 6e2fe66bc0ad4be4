"""The local engine: a job's processes on this machine, started and watched in the coordinator's own process,
with no agent, no registration, no heartbeats over the network and no port probes (one machine has no peer
to reach). What `tfdist launch` without --coordinator uses.

It offers one node, `local`, with the launch's slots, and works the way an agent does, level-triggered,
through the node protocol in-process (EngineHost.register_node and node_report): its work is derived
from the durable state (ports to lease, runs to start or stop), read when the coordinator says the node's
work changed, and carried out by the agent's own executor
(cluster/agent/node_runs.py: machine-wide port leases, JobRun, the gang). Output, metric rows and exits go
straight into the coordinator's store, in order: a rank's lines before its exit. While a job runs it reports
the ranks that joined and their progress every second (the start-up and step watchdogs read them); idle, it
does nothing at all."""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterable

from cluster.agent.leftovers import GroupsFile, kill_leftovers
from cluster.agent.node_runs import NodeRuns, Shipping
from cluster.coordinator.engine import EngineBase, EngineHost
from cluster.shared.model import Address, AgentRecord, Gpu, LogLine, MetricRow, WorkerExit
from cluster.shared.work import AgentReport
from tfdist.errors import InternalError, NotFoundError, PermissionDeniedError, TfdistError, UserError

log = logging.getLogger("tfdist.local")
NODE = "local"
LOOPBACK = Address("127.0.0.1", 8, "lo")
WATCH_INTERVAL = 1.0  # seconds between reports while a job runs: joined ranks and progress for the watchdogs
SHIP_INTERVAL = 0.1  # seconds a worker's line or metric row may wait before it is stored (as an agent's)
RETRY = 0.5  # seconds before storing again what the store refused (its disk full): nothing is dropped
# What storing a job's output can meet that retrying will not change (the job pruned, or not on this node):
# that item is dropped, said once, and the rest go on (an agent's outbox does the same).
REFUSED = (NotFoundError, PermissionDeniedError, UserError)


class LocalEngine(EngineBase):
    name = "local"

    def __init__(self, slots: int, gpus: tuple[Gpu, ...] = ()):
        """`gpus`: the GPUs behind the slots, one each (cluster/shared/gpus.py: slots_on_gpus); none: CPU slots."""
        self.slots, self.gpus = slots, tuple(gpus)
        self._host: EngineHost | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # report now: the node's work changed, or a run ended
        self._ship_wake = threading.Event()
        self._queue_lock = threading.Lock()
        self._ship_lock = threading.Lock()  # held while a batch is being stored: it is still owed until then
        self._shipped = threading.Condition()  # notified after each round of storing (`_ship_rounds`)
        self._ship_rounds = 0
        self._lines: dict[str, list[LogLine]] = {}  # job -> lines not stored yet, in order
        self._rows: dict[str, list[MetricRow]] = {}
        self._exits: list[tuple[str, WorkerExit]] = []  # stored after the job's lines and rows
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()  # close() began: only stops are carried out, no new start
        # Its workers' process groups, so the next launch on this machine kills what a killed one left
        # (workers die with this process; what they started may not: cluster/agent/leftovers.py).
        self._groups = GroupsFile(NODE)
        self.runs = NodeRuns(NODE, [LOOPBACK], Shipping(self._line, self._metric, self._exit, self._drain,
                                                        self._forget), changed=self._wake.set,
                             started=self._save_groups)

    def attach(self, host: EngineHost) -> None:
        self._host = host
        kill_leftovers(self._groups.directory, NODE)
        host.register_node(self._record(), (), (), time.time(), watched=False)  # its node is this process
        host.on_work_changed(self._work_changed)
        for target, name in ((self._work_loop, "local-engine"), (self._ship_loop, "local-shipping")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self, timeout: float) -> None:
        """Stops every run's workers (SIGTERM, then SIGKILL after their grace) and waits for them, bounded.
        From here on no run starts: a job that fails as its workers stop and is placed again meanwhile (it
        had restarts left) is not started behind the close."""
        self._closing.set()
        deadline = time.monotonic() + timeout
        idle = False
        while not idle and time.monotonic() < deadline:
            self.runs.stop_all()  # again each round: a run started just before the close began
            idle = self.runs.wait_idle(min(0.5, max(0.0, deadline - time.monotonic())))
        self._stop.set()
        self._wake.set()
        self._ship_wake.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if not idle:
            log.warning("local engine: workers of %s still running after %.0fs", self.runs.job_ids(), timeout)
        self._save_groups()

    def _save_groups(self) -> None:
        self._groups.save(self.runs.process_groups())

    def _work_changed(self, nodes: Iterable[str]) -> None:
        if NODE in nodes:
            self._wake.set()

    @property
    def host(self) -> EngineHost:
        if self._host is None:
            raise InternalError("the local engine is not attached to a coordinator")
        return self._host

    def _record(self) -> AgentRecord:
        return AgentRecord(NODE, self.slots, (LOOPBACK,), self.gpus)

    # ---------------------------------------------------------------- the node's work
    def _work_loop(self) -> None:
        while not self._stop.is_set():
            again = False
            try:
                again = self._report_once()
            except TfdistError as e:  # the store refused (a full disk): the next round tries again
                log.warning("local engine: %s", e)
                self._stop.wait(RETRY)
            except Exception:  # noqa: BLE001 - never a silent end: its node is not watched for silence
                log.exception("local engine: carrying out the node's work failed; trying again")
                self._stop.wait(RETRY)
            if not again:
                self._wake.wait(WATCH_INTERVAL if self.runs.job_ids() else None)
            self._wake.clear()

    def _report_once(self) -> bool:
        """One report of what the node runs and holds, and its work carried out; True when there is more to
        say at once (ports just leased)."""
        report = AgentReport(NODE, self.runs.running(), self.runs.leased(), self.runs.take_port_results(), {})
        work = self.host.node_report(report, time.time())
        if work is None:  # the coordinator forgot the node (it cannot, in-process; but never run blind)
            self.host.register_node(self._record(), (), (), time.time(), watched=False)
            return True
        if self._closing.is_set():  # only stops: what is placed now is not started
            for job_id in work.stop_jobs:
                self.runs.stop_job(job_id, work.stop_grace.get(job_id))
            return False
        self.runs.apply(work)
        return bool(work.check_ports)

    # ---------------------------------------------------------------- what the runs produce
    def _line(self, job_id: str, rank: int, stream: str, text: str) -> None:
        with self._queue_lock:
            self._lines.setdefault(job_id, []).append(LogLine(rank, stream, text, time.time()))
        self._ship_wake.set()

    def _metric(self, job_id: str, row: MetricRow) -> None:
        with self._queue_lock:
            self._rows.setdefault(job_id, []).append(row)

    def _exit(self, job_id: str, exit_: WorkerExit) -> None:
        with self._queue_lock:
            self._exits.append((job_id, exit_))
        self._ship_wake.set()

    def _ship_loop(self) -> None:
        while True:
            stopping = self._stop.is_set()
            try:
                self.runs.metrics.read()  # the workers' rows: metrics, checkpoints, "I check for preemption"
                self._ship_once()
                with self._shipped:
                    self._ship_rounds += 1
                    self._shipped.notify_all()
            except Exception as e:  # noqa: BLE001 - the store's disk full, or anything: keep it, try again
                if not isinstance(e, TfdistError):
                    log.exception("local engine: storing the workers' output failed")
                if stopping:
                    log.warning("local engine: output not stored at shutdown: %s", e)
                    return
                log.warning("local engine: could not store the workers' output yet: %s", e)
                self._stop.wait(RETRY)
                continue
            if stopping:
                return
            self._ship_wake.wait(SHIP_INTERVAL)
            self._ship_wake.clear()

    def _ship_once(self) -> None:
        """Lines, then rows, then exits: a rank's last lines and the step it stopped at are stored before the
        exit that may end the job. What the store refuses stays queued, in order."""
        with self._ship_lock:
            self._store_queued()

    def _store_queued(self) -> None:
        with self._queue_lock:
            lines, self._lines = self._lines, {}
            rows, self._rows = self._rows, {}
            exits, self._exits = self._exits, []
        try:
            while lines:
                job_id, batch = next(iter(lines.items()))
                self._store(job_id, "lines", lambda: self.host.push_logs(NODE, job_id, batch))
                del lines[job_id]
            while rows:
                job_id, metric_rows = next(iter(rows.items()))
                self._store(job_id, "metric rows", lambda: self.host.push_metrics(NODE, job_id, metric_rows))
                del rows[job_id]
            while exits:
                job_id, exit_ = exits[0]
                self._store(job_id, "exit", lambda: self.host.report_exit(NODE, job_id, exit_, time.time()))
                exits.pop(0)
        finally:
            if lines or rows or exits:
                with self._queue_lock:
                    for job_id, batch in lines.items():
                        self._lines[job_id] = batch + self._lines.get(job_id, [])
                    for job_id, metric_rows in rows.items():
                        self._rows[job_id] = metric_rows + self._rows.get(job_id, [])
                    self._exits[:0] = exits

    @staticmethod
    def _store(job_id: str, what: str, store) -> None:
        """Stores one item; one the coordinator refuses for good is dropped, said (the rest go on)."""
        try:
            store()
        except REFUSED as e:
            log.warning("local engine: job %s's %s dropped: %s", job_id, what, e)

    def _owes(self, job_id: str) -> bool:
        with self._ship_lock, self._queue_lock:
            return job_id in self._lines or job_id in self._rows or any(j == job_id for j, _ in self._exits)

    def _drain(self, job_id: str) -> None:
        """Until what the job's run produced is stored (bounded by the engine's stop): woken by each round
        of storing, not polling (a run's end waits on it)."""
        while not self._stop.is_set():
            with self._shipped:
                seen = self._ship_rounds
            if not self._owes(job_id):
                return
            self._ship_wake.set()
            with self._shipped:
                self._shipped.wait_for(lambda: self._ship_rounds != seen or self._stop.is_set(), timeout=RETRY)

    def _forget(self, job_id: str) -> None:
        with self._queue_lock:
            self._lines.pop(job_id, None)
            self._rows.pop(job_id, None)

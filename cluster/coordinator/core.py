"""The coordinator's executor, without gRPC: every method takes typed values and `now`.

Each event (submit, cancel, an exit, output, a node's report or loss, a deadline) is applied under one
lock in ONE store transaction (`event`), so a `kill -9` at any point leaves all of it or none of it, and
every RPC can be retried: a retried submit finds its job by submission id, a retried exit or output batch
is stored once.

This is the job side: the engines (cluster/engines/) hold the nodes' side and talk to it through the engine
contract (engine.py; its methods here: engine_host.py), their nodes through the node protocol
(cluster/coordinator/nodes/: registration, heartbeats, liveness, port checks and the work it derives). What to do is decided by pure functions, each in its
module: admission (admission.py), a worker's exit (exits.py), the watchdogs (watchdogs.py), outcomes and
failures (policy.py), the scheduler and placement, a job's life (job_machine.py); JobLifecycle
(lifecycle.py) applies a job's steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Callable, Iterable, Mapping, Sequence

from cluster.coordinator import exits as exits_lib, job_machine, policy
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.engine import EventLock, PlainLock
from cluster.coordinator.engine_host import CoreHost
from cluster.coordinator.handover import Handover
from cluster.coordinator.experiments.runner import Experiments
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.metrics import Telemetry, Throughput
from cluster.coordinator.intake import Intake
from cluster.coordinator.nodes.events import NodeEvents
from cluster.coordinator.store import StateStore
from cluster.coordinator.run_state import Runs
from cluster.coordinator.values import (AgentLive, BadRequest, ChangeBoard, Lookup, NotFound,  # noqa: F401 (re-exported)
                                        Settings)
from cluster.shared.work import NodeUsage
from cluster.shared.model import AllocState, Job, JobSpec, JobState, LogLine, MetricRow, WorkerExit
from tfdist.metrics import MAX_NAME as MAX_METRIC_NAME  # one limit, checked by writer, agent and coordinator
from tfdist.metrics import stored as kept_with_metrics
from tfdist.errors import PermissionDeniedError

log = logging.getLogger("tfdist.coordinator")

MAX_LOG_LINE = 16384  # a backstop: agents already cut lines at 8 KiB, saying so


@dataclasses.dataclass
class EventEnd:
    version: int = 0  # the node's work version as the event ended (`event(version_of=...)`)


class CoordinatorCore:
    def __init__(self, store: StateStore, settings: Settings = Settings(), now: float = 0.0,
                 lock: EventLock | None = None):
        """`lock`: its engine's (Engine.event_lock: the agents engine lets users' actions go first); None: plain."""
        self.store = store
        self.settings = settings
        self.lock = lock or PlainLock()
        self.board = ChangeBoard()  # per job: wakes log followers
        self.agent_board = ChangeBoard(limit=None)  # per node (all: pokes compare with it): its work changed
        # The nodes, by name (lost ones too): those stored, until their engine says more (the agents engine
        # gives each a grace period to re-attach after a restart).
        self.agents: dict[str, AgentLive] = {r.name: AgentLive(r, now) for r in store.agents()}
        self.allocs = AllocationTable(store)
        self.runs = Runs()  # each active job's run, one value each (run_state.py)
        self.telemetry = Telemetry(settings.counting)  # Prometheus's counters and histograms (metrics.py)
        self.throughput = Throughput()  # running jobs' steps/s, from their ranks' progress
        self.usage: dict[str, NodeUsage] = {}  # agent -> its latest sample (in memory: a restart forgets it)
        self.metrics_addresses: dict[str, str] = {}  # agent -> HOST:PORT of its /metrics (as it registered)
        self.lifecycle = JobLifecycle(store, self.allocs, self.agents, self.runs, settings, self.telemetry)
        self.intake = Intake(store, self.lifecycle, settings, self.telemetry)
        self.experiments = Experiments(store, self.lifecycle, self.intake)  # searches whose trials are jobs
        self.nodes = NodeEvents(self, now)  # what every engine's nodes say, and their work (the node protocol)
        self.engine_reader = store.reader()  # engines' reads of a job, without the lock (a connection per thread)
        self.host = CoreHost(self)  # what its engine sees of it (engine.py's EngineHost)
        with self.event():
            for job in store.jobs([JobState.STARTING, JobState.RUNNING]):
                self.lifecycle.handle(job.id, job_machine.Adopted(), now)

    def attach_engine(self, engine, now: float | None = None) -> None:
        """Hands the job side to its engine (Engine.attach, with the host) and asks it where a run's peers
        reach its nodes (Engine.peer_addresses) as each run is placed; an engine that places gangs itself is
        handed each queued run (handover.py) instead of the scheduler's round."""
        self.nodes.restart_grace(time.time() if now is None else now)  # from now: its nodes may re-attach
        self.lifecycle.addresses_of_job = engine.peer_addresses
        self.lifecycle.demand_to = engine.demand
        if engine.places_gangs:
            self.lifecycle.hand_over(Handover(engine.name, engine.place))
        engine.attach(self.host)

    @property
    def waiting(self) -> Mapping[str, str]:
        """Job -> why it waits: a queued job for nodes (the scheduler's last word), a placed one for its
        nodes to start its workers or its ranks to join (the start-up watchdog's)."""
        return self.runs.reasons()

    @contextlib.contextmanager
    def event(self, durable: bool = False, version_of: str = "", user: bool = False):
        """One event: under the lock, in one transaction; the cache follows a rollback. `durable`: the
        transaction is on disk before the event returns, synced after the lock is let go (group commit:
        events waiting together share one fsync, and the next event need not wait for it). The changed
        nodes' versions move before the lock is let go; `version_of`: a node whose version then the
        yielded EventEnd gets (the work a heartbeat answers, and the version that covers it exactly).
        `user`: a user's action, which the engine's lock may let go before waiting nodes' events."""
        end = EventEnd()
        with self.lock.for_user() if user else self.lock:
            self.runs.begin()
            try:
                with self.store.transaction():
                    yield end
                    self.experiments.settle()  # what trials' events decide, in the same transaction
            except BaseException:
                self.experiments.pending.clear()
                self.allocs.reload()
                self.lifecycle.reload_queue()
                self.runs.rollback()
                raise
            touched = self.runs.commit()
            changed, self.allocs.changed = self.agent_board.advance(self.allocs.changed), set()
            end.version = self.agent_board.version(version_of) if version_of else 0
            mark = self.store.commits
        try:
            if durable:
                self.store.sync(mark)
        finally:  # committed either way: followers and agents hear of it
            if touched:
                self.board.bump(touched)
            if changed:
                self.agent_board.announce(changed)

    # ---------------------------------------------------------------- what nodes say (an engine's host)
    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        self.agent_board.listeners.append(listener)

    def node_lost(self, name: str, outcome: policy.Outcome, now: float) -> None:
        """Inside an engine's event: the node is gone (its engine says why); its jobs fail and free it."""
        self.agents[name].lost = True
        self.lifecycle.node_changed(name)
        self.usage.pop(name, None)
        self.telemetry.node_losses.inc()
        for alloc in self.allocs.on_agent(name):
            self.lifecycle.handle(alloc.job_id, job_machine.Failed(outcome), now)
            self.lifecycle.free(alloc.job_id, name)

    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None:
        with self.event():
            job = self._job_on(agent, job_id)
            report = exits_lib.read_exit(agent, exit_, job, self.lifecycle.plan(job_id), now)
            if not self.store.record_exit(job_id, report.recorded):
                return  # a retried report: applied once
            if report.history:
                return  # a worker of an earlier run, stopped for a restart: history only
            if report.event:
                self.store.update_job(job_id, now, report.event)
            alloc = self.allocs.get(job_id, agent)
            if alloc is not None and alloc.state in (AllocState.LEASED, AllocState.REACHABLE):
                self.allocs.update(job_id, agent, state=AllocState.STARTED)  # an exit proves the start
                self.lifecycle.handle(job_id, job_machine.NodesStarted(), now)
            self.runs.touched.add(job_id)
            self.lifecycle.handle(job_id, job_machine.Exited(), now)

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "",
                  first_seq: int = 0) -> None:
        if not lines:
            return
        with self.event():
            self._job_on(agent, job_id)
            cap = self.settings.max_log_lines
            stored = self.store.log_count(job_id) if cap else 0
            kept = [dataclasses.replace(l, text=l.text[:MAX_LOG_LINE]) for l in policy.log_kept(lines, stored, cap)]
            new = self.store.append_logs(job_id, kept, source, first_seq) if kept else 0
            if cut := policy.log_cut(job_id, stored, new, cap, lines[-1].time):
                self.store.append_logs(job_id, [cut])  # tfdist's own line, outside the agent's numbering
            self.runs.touched.add(job_id)

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None:
        if not rows:
            return
        for row in rows:
            if not row.name or len(row.name) > MAX_METRIC_NAME:
                raise BadRequest(f"metric name {row.name[:40]!r}... must have 1-{MAX_METRIC_NAME} characters")
        with self.event():
            job = self._job_on(agent, job_id)
            self.store.append_metrics(job_id, [r for r in rows if kept_with_metrics(r.name)], source,
                                      first_seq)
            for row in rows:
                self.lifecycle.record(job, row, now=row.time)
            self.experiments.metrics(job, rows)

    def _job_on(self, agent: str, job_id: str) -> Job:
        return job_on(self.store.job(job_id), job_id, agent, self.allocs.get(job_id, agent) is not None)

    # ---------------------------------------------------------------- jobs
    def submit(self, spec: JobSpec, now: float, owner: str = "") -> tuple[str, str]:
        """Stores the job durably and schedules at once; returns (job id, state after scheduling).
        A spec whose submission id is already known returns that job: a retried submit is one job."""
        answer = self.submit_batch([(spec, owner)], now)[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def submit_batch(self, submissions: Sequence[tuple[JobSpec, str]], now: float) -> list[tuple[str, str] | BadRequest]:
        """Several submissions (spec, owner) in one event: one lock, one transaction, one fsync for them all
        (the server's SubmitQueue gathers concurrent ones). Each gets its answer or its own refusal."""
        for spec, _ in submissions:
            spec.to_json()  # the stored form, made outside the lock (its cost grows with the spec, up to the limits)
        answers: list[tuple[str, str] | BadRequest] = []
        with self.event(durable=True, user=True):
            for spec, owner in submissions:
                try:
                    searches = spec.config.searcher and not spec.experiment_id
                    answers.append((self.experiments if searches else self.intake).submit(spec, now, owner))
                except BadRequest as e:  # refused before it wrote anything: the others go on
                    answers.append(e)
        return answers

    def cancel(self, job_ref: str, now: float) -> str:
        return self._act(job_ref, now, job_machine.Canceled())

    def preempt(self, job_ref: str, now: float) -> str:
        return self._act(job_ref, now, job_machine.PreemptRequested())  # see job_machine.preempt

    def resume(self, job_ref: str, now: float) -> str:
        return self._act(job_ref, now, job_machine.Resumed())  # a new attempt, from its latest checkpoint

    def _act(self, job_ref: str, now: float, event: job_machine.Event) -> str:  # the user's: its state after
        with self.lock.user_action(), self.event(user=True):
            experiment = self.experiments.resolve(job_ref)  # `eN` or an experiment's id: all its trials
            if experiment is not None:
                action = {job_machine.Canceled: "cancel", job_machine.PreemptRequested: "preempt",
                          job_machine.Resumed: "resume"}[type(event)]
                return self.experiments.act(experiment, action, now)
            job_id = self.resolve_job_id(job_ref)
            self.lifecycle.handle(job_id, event, now)
            return self.store.job(job_id).state.value

    def resolve_job_id(self, job_ref: str, reader=None) -> str:
        """Accepts a full id or just its number."""
        source = reader or self.store
        if source.job(job_ref):
            return job_ref
        if job_ref.isdigit():
            job = source.job_by_seq(int(job_ref))
            if job:
                return job.id
        raise NotFound(f"job {job_ref} not found; `tfdist jobs` lists the jobs")

    # ---------------------------------------------------------------- watchdogs
    def check_deadlines(self, now: float) -> None:
        """Fails jobs whose start-up is overdue or whose ranks stopped making progress (the job machine's
        DeadlineCheck). Called periodically, beside each engine's own watch (Engine.tick)."""
        with self.event():
            for job_id, run in self.runs.items():
                if run.watched:
                    self.lifecycle.handle(job_id, job_machine.DeadlineCheck(), now)
            self.lifecycle.schedule(now)


def job_on(job: Job | None, job_id: str, agent: str, holds: bool) -> Job:
    """The job a node reports about, if the job was placed on that node (`holds`: it still holds part of
    it): a node cannot end, log into or report metrics for another node's job."""
    if job is None:
        raise NotFound(f"job {job_id} not found")
    if not holds and all(a.agent != agent for a in job.placement):
        raise PermissionDeniedError(f"job {job_id} does not run on node {agent}")
    return job

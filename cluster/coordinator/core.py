"""The coordinator's executor, without gRPC: every method takes typed values and `now`.

Each event (register, heartbeat, exit, submit, cancel, node loss, timeout) is
applied under one lock in ONE store transaction (`_event`), so a `kill -9` at any
point leaves all of it or none of it, and every RPC can be retried: a retried
submit finds its job by submission id, a retried exit or output batch is
stored once. Agent work is level-triggered: what an agent must do (lease
ports, probe peers, start workers, stop a job) is derived on every heartbeat
from the durable state, never from messages a restart could lose.

What to do is decided by pure functions, each in its module: an agent's work (work.py), admission
(admission.py), a node's report or silence (reconcile.py), port checks and probes (leases.py), a
worker's exit (exits.py), the watchdogs (watchdogs.py), outcomes and failures (policy.py), the
scheduler and placement; a job's transitions are applied by its JobLifecycle (lifecycle.py), a node's
handshake answers by Handshake (handshake.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, Iterable, Mapping, Sequence

from cluster.coordinator import exits as exits_lib, job_machine, policy, reconcile
from cluster.coordinator import work as work_lib
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.liveness import Liveness
from cluster.coordinator.metrics import Telemetry, Throughput
from cluster.coordinator.handshake import Handshake
from cluster.coordinator.intake import Intake
from cluster.coordinator.store import StateStore
from cluster.coordinator.user_first import UserFirst, UserFirstLock
from cluster.coordinator.run_state import Runs
from cluster.coordinator.values import (AgentLive, BadRequest, ChangeBoard, Lookup, NotFound,  # noqa: F401 (re-exported)
                                        Settings)
from cluster.shared.work import AgentReport, NodeUsage, RunningJob, Work
from cluster.shared.model import (AgentRecord, Allocation, AllocState, Job, JobSpec, JobState, LogLine, MetricRow,
                                  WorkerExit)
from tfdist.metrics import MAX_NAME as MAX_METRIC_NAME  # one limit, checked by writer, agent and coordinator
from tfdist.metrics import RECORD_PREFIX
from tfdist.errors import PermissionDeniedError

log = logging.getLogger("tfdist.coordinator")

MAX_LOG_LINE = 16384  # a backstop: agents already cut lines at 8 KiB, saying so


@dataclasses.dataclass
class EventEnd:
    version: int = 0  # the agent's work version as the event ended (`_event(version_of=...)`)


class CoordinatorCore:
    def __init__(self, store: StateStore, settings: Settings = Settings(), now: float = 0.0):
        self.store = store
        self.settings = settings
        self.lock = UserFirstLock()  # a user's action takes it before agents' events (user_first.py)
        self.user_first = UserFirst()  # users' actions before agents' heartbeats (user_first.py)
        self.board = ChangeBoard()  # per job: wakes log followers
        self.agent_board = ChangeBoard(limit=None)  # per agent (all: pokes compare with it): wakes its WaitForWork
        # After a restart every known agent gets a full grace period to re-attach: lost_after, plus the longest
        # heartbeat interval it may have been given (its beacons count again once a heartbeat confirms them).
        records = store.agents()
        grace = reconcile.heartbeat_interval(len(records), settings, beacons=True)
        self.agents: dict[str, AgentLive] = {r.name: AgentLive(r, now + grace) for r in records}
        self.allocs = AllocationTable(store)
        self.runs = Runs()  # each active job's run, one value each (run_state.py)
        self.telemetry = Telemetry(settings.counting)  # Prometheus's counters and histograms (metrics.py)
        self.throughput = Throughput()  # running jobs' steps/s, from their ranks' progress
        self.usage: dict[str, NodeUsage] = {}  # agent -> its latest sample (in memory: a restart forgets it)
        self.metrics_addresses: dict[str, str] = {}  # agent -> HOST:PORT of its /metrics (as it registered)
        self.lifecycle = JobLifecycle(store, self.allocs, self.agents, self.runs, settings, self.telemetry)
        self.intake = Intake(store, self.lifecycle, settings, self.telemetry)
        self.handshake = Handshake(store, self.allocs, self.lifecycle, self.runs, settings)
        with self._event():
            for job in store.jobs([JobState.STARTING, JobState.RUNNING]):
                self.lifecycle.handle(job.id, job_machine.Adopted(), now)
        self.liveness = Liveness(self.agents, lambda: len(self.lifecycle.live.index.nodes), settings, self.lock)

    @property
    def waiting(self) -> Mapping[str, str]:
        """Job -> why it waits: a queued job for nodes (the scheduler's last word), a placed one for its
        nodes to start its workers or its ranks to join (the start-up watchdog's)."""
        return self.runs.reasons()

    @contextlib.contextmanager
    def _event(self, durable: bool = False, version_of: str = "", user: bool = False):
        """One event: under the lock, in one transaction; the cache follows a rollback. `durable`: the
        transaction is on disk before the event returns, synced after the lock is let go (group commit:
        events waiting together share one fsync, and the next event need not wait for it). The changed
        agents' versions move before the lock is let go; `version_of`: an agent whose version then the
        yielded EventEnd gets (the work a heartbeat answers, and the version that covers it exactly).
        `user`: a user's action, which takes the lock before any waiting agent's event."""
        end = EventEnd()
        with self.lock.for_user() if user else self.lock:
            self.runs.begin()
            try:
                with self.store.transaction():
                    yield end
            except BaseException:
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

    # ---------------------------------------------------------------- agents
    def register(self, record: AgentRecord, running: Sequence[RunningJob], leased: Iterable[str], now: float,
                 watched: bool = True) -> None:
        """An agent (re)joins, saying what it runs and which jobs' ports it holds (on heartbeats until its
        first beacon arrives, if it beacons). `watched`: lost when silent (False: an engine's own node)."""
        if not record.name or record.slots < 1:
            raise BadRequest(f"agent {record.name!r}: needs a name and at least 1 slot, got {record.slots}")
        if record.gpus and len(record.gpus) != record.slots:
            raise BadRequest(f"agent {record.name}: {record.slots} slots but {len(record.gpus)} GPUs")
        with self._event():
            self.store.upsert_agent(record, now)
            previous = self.agents.get(record.name)
            agent = AgentLive(record, now, running={j.job_id: set(j.joined_ranks) for j in running},
                              leased=set(leased), attempts={j.job_id: j.attempt for j in running}, watched=watched)
            self.agents[record.name] = agent
            self.lifecycle.node_changed(record.name)
            self.liveness.gone(record.name)
            log.info("agent %s %s: %d %s slots, running %s", record.name, "re-attached" if previous else "registered",
                     record.slots, "GPU" if record.gpu else "CPU", sorted(agent.running) or "nothing")
            self._reconcile(agent, now, came_back=True)
            self.lifecycle.schedule(now)

    # ---------------------------------------------------------------- an engine's host (engine.py)
    def offer(self, record: AgentRecord, now: float) -> None:
        self.register(record, (), (), now, watched=False)

    def report(self, report: AgentReport, now: float) -> Work | None:
        return self.heartbeat(report, now)  # the same report and work as an agent's, read in-process

    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        self.agent_board.listeners.append(listener)

    def heartbeat(self, report: AgentReport, now: float) -> Work | None:
        """Returns the agent's work, or None if it must register again."""
        name, leased = report.agent, set(report.leased_jobs)
        agent = self.agents.get(name)
        self.telemetry.heartbeats.inc()
        if report.usage is not None and agent is not None:
            self.usage[name] = report.usage  # one dict write: atomic, no lock needed
        if agent is not None and not agent.lost and not report.running and not leased and not report.port_results \
                and not report.probe_results and not agent.busy and not self.allocs.on_agent(name):
            # The common case, an idle node: no lock, no SQL (an attribute write is atomic).
            agent.last_heartbeat = now
            return Work()
        self.user_first.agent_turn()
        with self._event(version_of=name) as event:
            agent = self.agents.get(name)
            if agent is None or agent.lost:
                return None
            agent.last_heartbeat = now
            agent.running = {j.job_id: set(j.joined_ranks) for j in report.running}
            agent.attempts = {j.job_id: j.attempt for j in report.running}
            agent.leased = leased
            for job in report.running:  # the step watchdog: when each rank last moved, on our clock
                held = self.allocs.get(job.job_id, name)
                if (job.progress or self.runs.get(job.job_id).progress) and held is not None and \
                        held.state != AllocState.RELEASING and \
                        reconcile.runs_current(agent, job.job_id, self._attempt(job.job_id)):
                    self.lifecycle.handle(job.job_id, job_machine.Progress(job), now)
                    self.throughput.note(job.job_id, self.runs.get(job.job_id).progress)
            for job_id, busy in report.port_results.items():
                self.handshake.port_result(job_id, name, list(busy), now)
            for job_id, failures in report.probe_results.items():
                self.handshake.probe_result(job_id, name, failures, now)
            self._reconcile(agent, now, came_back=False)
            work = self._work_for(agent)
        work.version = event.version  # the version its answer covers, its own change included
        return work

    def _attempt(self, job_id: str) -> int | None:
        job = self.store.job(job_id)
        return job.attempt if job is not None else None

    def _allocations_of(self, agent: str) -> dict[str, tuple[Allocation, ...]]:
        """Job -> all of its allocations, for each job holding `agent` (in the agent's order)."""
        return {a.job_id: self.allocs.of_job(a.job_id) for a in self.allocs.on_agent(agent)}

    def _reconcile(self, agent: AgentLive, now: float, came_back: bool) -> None:
        """Brings the allocations on `agent` in line with what it says it runs and holds."""
        decisions = reconcile.reconcile(
            agent, self._allocations_of(agent.name), Lookup(self._attempt),
            Lookup(lambda job_id: {e.rank for e in self.lifecycle.exits(job_id)}),
            Lookup(lambda job_id: self.lifecycle.ranks_on(job_id, agent.name)), came_back)
        for d in decisions:
            if d.action in (reconcile.Action.JOINED, reconcile.Action.STARTED):
                self.lifecycle.handle(d.job_id, job_machine.Joined(frozenset(d.joined)), now)
                if d.action == reconcile.Action.STARTED:
                    self.allocs.update(d.job_id, agent.name, state=AllocState.STARTED)
                    self.lifecycle.handle(d.job_id, job_machine.NodesStarted(), now)
            elif d.action == reconcile.Action.LEASE_AGAIN:
                self.allocs.set_state(d.job_id, AllocState.LEASING)
                self.store.update_job(d.job_id, now, d.event)
            else:
                self.lifecycle.handle(d.job_id, job_machine.Failed(d.outcome), now)
        # What ended (just now, or before) and the agent no longer holds frees its slots.
        released = reconcile.released(agent, self.allocs.on_agent(agent.name))
        for job_id in released:
            self.lifecycle.free(job_id, agent.name)
        if released:
            self.lifecycle.schedule(now)

    def _work_for(self, agent: AgentLive) -> Work:
        dump = [job_id for job_id in self.runs.dumping() if agent.name in self.runs.get(job_id).dump_to]
        work = work_lib.work_for(agent, self._allocations_of(agent.name), Lookup(self.store.job),
                                 Lookup(self.lifecycle.plan), self.settings, dump)
        for job_id in dump:
            self.lifecycle.handle(job_id, job_machine.StacksAsked(agent.name), 0.0)  # asked once
        return work

    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None:
        with self._event():
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
        with self._event():
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
        with self._event():
            job = self._job_on(agent, job_id)
            self.store.append_metrics(job_id, [r for r in rows if not r.name.startswith(RECORD_PREFIX)], source,
                                      first_seq)
            for row in rows:
                self.lifecycle.record(job, row, now=row.time)

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
        with self._event(durable=True, user=True):
            for spec, owner in submissions:
                try:
                    answers.append(self.intake.submit(spec, now, owner))
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
        with self.user_first.user(), self._event(user=True):
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
    def check_agents(self, now: float) -> None:
        """Declares silent agents lost (failing their jobs) and fails jobs whose start-up is overdue or
        whose ranks stopped making progress. Called periodically."""
        silent = reconcile.lost_agents(list(self.agents.values()), now, self.settings.lost_after)  # no lock: reads
        with self._event():
            for name, silence in reconcile.still_silent(self.agents, silent, now, self.settings.lost_after):
                self.agents[name].lost = True
                self.lifecycle.node_changed(name)
                self.usage.pop(name, None)
                self.telemetry.node_losses.inc()
                self.liveness.gone(name)
                log.warning("agent %s lost: no heartbeat or beacon for %.1fs", name, silence)
                for alloc in self.allocs.on_agent(name):
                    self.lifecycle.handle(alloc.job_id, job_machine.Failed(policy.lost(name, silence)), now)
                    self.lifecycle.free(alloc.job_id, name)
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

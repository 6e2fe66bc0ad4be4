"""The coordinator's logic, without gRPC: every method takes typed values and `now`.

Each event (register, heartbeat, exit, submit, cancel, node loss, timeout) is
applied under one lock in ONE SQLite transaction, so a `kill -9` at any
point leaves all of it or none of it, and every RPC can be retried: a retried
submit finds its job by submission id, a retried exit or output batch is
stored once. Agent work is level-triggered: what an agent must do (lease
ports, probe peers, start workers, stop a job) is derived on every heartbeat
from the durable state, never from messages a restart could lose. Decisions
(outcomes, failures, timeouts) are pure functions in cluster/coordinator/policy.py; the
per-mode launch plan (cluster/shared/modes) decides processes and environments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
from typing import Iterable, Mapping, Sequence

from cluster.shared import modes
from cluster.coordinator import placement as placement_lib, policy, scheduler
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.values import (AgentLive, BadRequest, ChangeBoard, NotFound,  # noqa: F401 (re-exported)
                                        ProbeTask, Settings, StartTask, Work)
from cluster.shared.model import describe_exit, AgentRecord, Allocation, AllocState, Job, JobSpec, JobState, LogLine, MetricRow, WorkerExit
from cluster.shared.modes import JobPlan, NodePlacement, Placement
from cluster.coordinator.store import Store
from tfdist.metrics import MAX_NAME as MAX_METRIC_NAME  # one limit, checked by writer, agent and coordinator
from tfdist.metrics import RECORD_PREFIX

log = logging.getLogger("tfdist.coordinator")

MAX_LOG_LINE = 16384  # a backstop: agents already cut lines at 8 KiB, saying so
RESTARTED = "restarted (its agent registered again without the job's workers)"


class CoordinatorCore(JobLifecycle):
    def __init__(self, store: Store, settings: Settings = Settings(), now: float = 0.0):
        self.store = store
        self.settings = settings
        self.lock = threading.RLock()
        self.board = ChangeBoard()  # per job: wakes log followers
        self.agent_board = ChangeBoard()  # per agent: wakes its WaitForWork (new work on its node)
        self.agents: dict[str, AgentLive] = {}
        self.excluded_ports: dict[tuple[str, str], set[int]] = {}  # (job, agent) -> ports found busy
        self.waiting: dict[str, str] = {}
        self.allocs = AllocationTable(store)
        self._plans: dict[str, JobPlan] = {}
        self._start_clock: dict[str, float] = {}  # job -> when its start-up began (or the coordinator did)
        self._joined: dict[str, set[int]] = {}  # job -> ranks that joined (reported by agents; not durable)
        # The step watchdog (not durable: after a restart every rank's clock starts afresh).
        self._progress: dict[str, dict[int, tuple[int, float]]] = {}  # job -> rank -> (step, when reported)
        self._stalled: dict[str, tuple[policy.Outcome, float]] = {}  # job -> (its outcome, when to apply it)
        self._dump_to: dict[str, set[str]] = {}  # job -> agents still to be asked for their workers' stacks
        self._touched: set[str] = set()  # jobs whose followers to wake after this event
        # After a restart every known agent gets a full grace period to re-attach.
        for record in store.agents():
            self.agents[record.name] = AgentLive(record, now)
        with self._event():
            for job in store.jobs([JobState.STARTING, JobState.RUNNING]):
                self._start_clock[job.id] = now
                self._decide(job.id, now)  # exits recorded by an older version, never decided
        self._update_heartbeat_interval()

    @contextlib.contextmanager
    def _event(self, durable: bool = False):
        """One event: under the lock, in one transaction; the cache follows a rollback."""
        with self.lock:
            try:
                with self.store.transaction(durable):
                    yield
            except BaseException:
                self.allocs.reload()
                self._plans.clear()
                self._touched.clear()
                raise
            touched, self._touched = self._touched, set()
            changed, self.allocs.changed = self.allocs.changed, set()
        if touched:
            self.board.bump(touched)
        if changed:
            self.agent_board.bump(changed)

    # ---------------------------------------------------------------- agents
    def heartbeat_interval(self) -> float:
        return self._heartbeat_interval

    def _update_heartbeat_interval(self) -> None:
        """Agents heartbeat every `heartbeat_interval` seconds, stretched so that all of them together
        send at most `max_heartbeats_per_s` (a Python gRPC server spends about 0.65 ms of CPU per
        call), but never so far apart that fewer than three fit in `lost_after`."""
        alive = sum(1 for a in self.agents.values() if not a.lost)
        wanted = max(self.settings.heartbeat_interval, alive / self.settings.max_heartbeats_per_s)
        self._heartbeat_interval = min(wanted, max(self.settings.heartbeat_interval, self.settings.lost_after / 3))

    def register(self, record: AgentRecord, running: Mapping[str, Iterable[int]], leased: Iterable[str],
                 now: float, attempts: Mapping[str, int] | None = None) -> None:
        if not record.name or record.slots < 1:
            raise BadRequest(f"agent {record.name!r}: needs a name and at least 1 slot, got {record.slots}")
        if record.gpus and len(record.gpus) != record.slots:
            raise BadRequest(f"agent {record.name}: {record.slots} slots but {len(record.gpus)} GPUs")
        with self._event():
            self.store.upsert_agent(record, now)
            previous = self.agents.get(record.name)
            agent = AgentLive(record, now, running={j: set(r) for j, r in running.items()}, leased=set(leased),
                              attempts=dict(attempts or {}))
            self.agents[record.name] = agent
            self._update_heartbeat_interval()
            log.info("agent %s %s: %d %s slots, running %s", record.name, "re-attached" if previous else "registered",
                     record.slots, "GPU" if record.gpu else "CPU", sorted(agent.running) or "nothing")
            self._reconcile(agent, now, came_back=True)
            self._schedule(now)

    def heartbeat(self, name: str, running: Mapping[str, Iterable[int]], leased: Iterable[str],
                  port_results: Mapping[str, Sequence[int]], probe_results: Mapping[str, Sequence[tuple]],
                  now: float, progress: Mapping[str, Mapping[int, tuple[int, float]]] | None = None,
                  attempts: Mapping[str, int] | None = None) -> Work | None:
        """Returns the agent's work, or None if it must register again. `progress`: job -> rank ->
        (step, seconds since the rank last reported), for the step watchdog."""
        leased = set(leased)
        agent = self.agents.get(name)
        if agent is not None and not agent.lost and not running and not leased and not port_results \
                and not probe_results and not agent.busy and not self.allocs.on_agent(name):
            # The common case, an idle node: no lock, no SQL (an attribute write is atomic).
            agent.last_heartbeat = now
            return Work()
        with self._event():
            agent = self.agents.get(name)
            if agent is None or agent.lost:
                return None
            agent.last_heartbeat = now
            agent.running = {j: set(r) for j, r in running.items()}
            agent.attempts = dict(attempts or {})
            agent.leased = leased
            for job_id, ranks in (progress or {}).items():
                if job_id in agent.running and self._current(agent, job_id):
                    seen = self._progress.setdefault(job_id, {})
                    seen.update({rank: (step, now - age) for rank, (step, age) in ranks.items()})
            for job_id, busy in port_results.items():
                self._port_result(job_id, name, list(busy), now)
            for job_id, failures in probe_results.items():
                self._probe_result(job_id, name, list(failures), now)
            self._reconcile(agent, now, came_back=False)
            return self._work_for(agent)

    def _reconcile(self, agent: AgentLive, now: float, came_back: bool) -> None:
        """Brings the allocations on `agent` in line with what it says it runs and holds."""
        for alloc in self.allocs.on_agent(agent.name):
            job_id = alloc.job_id
            has_it = job_id in agent.running or job_id in agent.leased
            if alloc.state == AllocState.RELEASING:
                continue
            if job_id in agent.running:
                if not self._current(agent, job_id):
                    continue  # an earlier run still being stopped there
                self._joined_update(job_id, agent.running[job_id])
                if alloc.state in (AllocState.LEASED, AllocState.REACHABLE):
                    self.allocs.update(job_id, agent.name, state=AllocState.STARTED)
                    self._maybe_running(job_id, now)
                continue
            if alloc.state in (AllocState.LEASED, AllocState.REACHABLE) and not has_it:
                # The agent lost its port leases (it restarted before the job started anywhere):
                # lease again, every node of the job, and probe again.
                if any(a.state == AllocState.STARTED for a in self.allocs.of_job(job_id)):
                    self._fail(job_id, now, policy.vanished(agent.name, self._ranks_on(job_id, agent.name),
                                                            RESTARTED if came_back else "lost its leased ports"))
                else:
                    self.allocs.set_state(job_id, AllocState.LEASING)
                    self.store.update_job(job_id, now, f"node {agent.name} lost its leased ports; leasing again")
            elif alloc.state == AllocState.STARTED:
                exited = {e.rank for e in self._exits(job_id)}
                missing = [r for r in self._ranks_on(job_id, agent.name) if r not in exited]
                if missing:
                    why = RESTARTED if came_back else "no longer runs the job's workers and never reported their exits"
                    self._fail(job_id, now, policy.vanished(agent.name, missing, why))
        # What ended (just now, or before) and the agent no longer holds frees its slots.
        released = [a.job_id for a in self.allocs.on_agent(agent.name) if a.state == AllocState.RELEASING
                    and a.job_id not in agent.running and a.job_id not in agent.leased]
        for job_id in released:
            self._free(job_id, agent.name)
        if released:
            self._schedule(now)

    def _current(self, agent: AgentLive, job_id: str) -> bool:
        """Whether what `agent` runs of `job_id` is the job's current run (not one being stopped)."""
        job = self.store.job(job_id)
        return job is not None and agent.attempts.get(job_id, 0) == job.attempt

    def _exits(self, job_id: str) -> list[WorkerExit]:
        """The exits of the job's current run (earlier runs' exits are history)."""
        job = self.store.job(job_id)
        return self.store.exits(job_id, job.attempt) if job else []

    def _joined_update(self, job_id: str, ranks: Iterable[int]) -> None:
        self._joined.setdefault(job_id, set()).update(ranks)

    def _ranks_on(self, job_id: str, agent: str) -> list[int]:
        alloc = self.allocs.get(job_id, agent)
        plan = self._plan(job_id)
        if alloc is None or plan is None:
            return []
        return [p.rank for p in plan.on_node(alloc.node_rank)]

    def _maybe_running(self, job_id: str, now: float) -> None:
        job = self.store.job(job_id)
        if job and job.state == JobState.STARTING and \
                all(a.state == AllocState.STARTED for a in self.allocs.of_job(job_id)):
            self._transition(job, JobState.RUNNING, now, "every node started its workers", started_at=now)

    def _free(self, job_id: str, agent: str) -> None:
        self.allocs.replace(job_id, [a for a in self.allocs.of_job(job_id) if a.agent != agent])
        self.excluded_ports.pop((job_id, agent), None)
        if not self.allocs.of_job(job_id):
            self._plans.pop(job_id, None)
            self._joined.pop(job_id, None)
        self._touched.add(job_id)

    def _work_for(self, agent: AgentLive) -> Work:
        work = Work()
        for alloc in self.allocs.on_agent(agent.name):
            job_allocs = self.allocs.of_job(alloc.job_id)
            if alloc.state == AllocState.LEASING:
                work.check_ports.append((alloc.job_id, alloc.ports))
                work.attempts[alloc.job_id] = self.store.job(alloc.job_id).attempt
            elif alloc.state == AllocState.LEASED and all(a.state == AllocState.LEASED or
                                                          a.state == AllocState.REACHABLE for a in job_allocs):
                targets = tuple((a.agent, a.address, p) for a in job_allocs if a.agent != alloc.agent
                                for p in a.ports)
                work.probes.append(ProbeTask(alloc.job_id, targets, self.settings.probe_timeout))
            elif alloc.state == AllocState.REACHABLE and alloc.job_id not in agent.running and \
                    all(a.state in (AllocState.REACHABLE, AllocState.STARTED) for a in job_allocs):
                start = self._start_task(alloc)
                if start:
                    work.start.append(start)
            elif alloc.state == AllocState.STARTED and self._serves_store(alloc):
                job = self.store.job(alloc.job_id)
                if job.preempt_requested and job.state.active:
                    work.preempt.append(alloc.job_id)
        for job_id, agents in self._dump_to.items():
            if agent.name in agents:
                agents.discard(agent.name)
                work.dump_stacks.append(job_id)
        held = {a.job_id: a for a in self.allocs.on_agent(agent.name)}
        for job_id in sorted(set(agent.running) | agent.leased):
            alloc = held.get(job_id)
            if alloc is None or alloc.state == AllocState.RELEASING:
                work.stop_jobs.append(job_id)
                job = self.store.job(job_id)
                failed = job is not None and job.state == JobState.FAILED
                work.stop_grace[job_id] = self.settings.failure_grace if failed else self.settings.stop_grace
        return work

    def _serves_store(self, alloc: Allocation) -> bool:
        plan = self._plan(alloc.job_id)
        return plan is not None and plan.store is not None and plan.store[0] == alloc.node_rank

    def _plan(self, job_id: str) -> JobPlan | None:
        """The job's launch plan (from its placement and spec), computed once per placement."""
        if job_id in self._plans:
            return self._plans[job_id]
        job = self.store.job(job_id)
        allocs = self.allocs.of_job(job_id) or (job.placement if job else ())
        if job is None or not allocs:
            return None
        gpu_nodes = {a.agent: bool(a.gpus) for a in allocs}
        latest = self.store.latest_checkpoint(job_id)
        placement = Placement(job_id, tuple(NodePlacement(a.agent, a.address, a.slots, a.ports, gpu_nodes[a.agent])
                                            for a in allocs), attempt=job.attempt,
                              checkpoint_dir=_job_checkpoint_dir(job),
                              latest_checkpoint=(latest.path, latest.step) if latest else None)
        plan = modes.planner(job.spec.distribution_mode).plan(placement, job.spec.config,
                                                              [a.gpus for a in allocs])
        self._plans[job_id] = plan
        return plan

    def _start_task(self, alloc: Allocation) -> StartTask | None:
        job = self.store.job(alloc.job_id)
        plan = self._plan(alloc.job_id)
        if job is None or plan is None:
            return None
        store = plan.store[1] if plan.store and plan.store[0] == alloc.node_rank else 0
        return StartTask(job_id=job.id, working_dir=job.spec.working_dir, command=job.spec.entrypoint,
                         processes=plan.on_node(alloc.node_rank), failure_grace=self.settings.failure_grace,
                         store_port=store, attempt=job.attempt)

    def _port_result(self, job_id: str, agent: str, busy: list[int], now: float) -> None:
        mine = self.allocs.get(job_id, agent)
        if mine is None or mine.state != AllocState.LEASING:
            return  # a repeated or late answer
        if not busy:
            multi_node = len(self.allocs.of_job(job_id)) > 1
            self.allocs.update(job_id, agent, state=AllocState.LEASED if multi_node else AllocState.REACHABLE)
            return
        excluded = self.excluded_ports.setdefault((job_id, agent), set())
        excluded.update(busy)
        try:
            ports = tuple(self._lease(agent, len(mine.ports), job_id, excluded))
        except placement_lib.PlacementError as e:
            self._fail(job_id, now, policy.Outcome(JobState.FAILED, f"cannot lease ports on {agent}: {e}", 1))
            return
        # No peer has probed yet: probes wait until every node of the job holds its ports.
        self.allocs.update(job_id, agent, ports=ports)
        self._plans.pop(job_id, None)
        job = self.store.job(job_id)
        self.store.update_job(job_id, now, f"ports {busy} busy on {agent}; leased {list(ports)} instead",
                              placement=self._with_live(job.placement, self.allocs.of_job(job_id)))

    def _probe_result(self, job_id: str, agent: str, failures: list[tuple], now: float) -> None:
        mine = self.allocs.get(job_id, agent)
        if mine is None or mine.state != AllocState.LEASED:
            return
        current = {(a.agent, a.address, p) for a in self.allocs.of_job(job_id) for p in a.ports}
        failures = [f for f in failures if tuple(f[:3]) in current]  # about ports still leased
        if failures:
            self._fail(job_id, now, policy.unreachable(agent, failures))
        else:
            self.allocs.update(job_id, agent, state=AllocState.REACHABLE)

    def _lease(self, agent: str, count: int, job_id: str, excluded: set[int]) -> list[int]:
        in_use = [p for a in self.allocs.on_agent(agent) if a.job_id != job_id for p in a.ports]
        return placement_lib.choose_ports(count, self.settings.port_range, in_use, excluded)

    @staticmethod
    def _with_live(placement: Sequence[Allocation], live: Sequence[Allocation]) -> list[Allocation]:
        by_agent = {a.agent: a for a in live}
        return [by_agent.get(a.agent, a) for a in placement]

    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None:
        with self._event():
            job = self.store.job(job_id)
            if job is None:
                raise NotFound(f"job {job_id} not found")
            plan = self._plan(job_id)
            current = exit_.attempt == job.attempt and job.state.active
            tolerated = exit_.exit_code != 0 and current and plan is not None and exit_.rank in plan.expendable
            if not self.store.record_exit(job_id, dataclasses.replace(exit_, agent=agent, time=now, tolerated=tolerated,
                                                                      last_lines=tuple(exit_.last_lines[-20:]))):
                return  # a retried report: applied once
            if exit_.attempt != job.attempt:
                return  # a worker of an earlier run, stopped for a restart: history only
            if tolerated:
                self.store.update_job(job_id, now, f"rank {exit_.rank} on node {agent} "
                                                   f"{describe_exit(exit_.exit_code)}; the job goes on without it")
            alloc = self.allocs.get(job_id, agent)
            if alloc is not None and alloc.state in (AllocState.LEASED, AllocState.REACHABLE):
                self.allocs.update(job_id, agent, state=AllocState.STARTED)  # an exit proves the start
                self._maybe_running(job_id, now)
            self._touched.add(job_id)
            self._decide(job_id, now)

    def _decide(self, job_id: str, now: float) -> None:
        """Applies the job's outcome once its exits decide it (the pure rule of its mode)."""
        job = self.store.job(job_id)
        plan = self._plan(job_id)
        if job is None or not job.state.active or plan is None:
            return
        outcome = policy.job_outcome(plan.success, plan.size, self._exits(job_id), plan.expendable)
        if outcome is None:
            return
        if outcome.state == JobState.FAILED:
            self._fail(job_id, now, outcome)
        elif job.preempted_step is not None:
            self._pause(job, now)
        else:
            self._end(job_id, outcome, now)

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "",
                  first_seq: int = 0) -> None:
        if not lines:
            return
        with self._event():
            if self.store.job(job_id) is None:
                raise NotFound(f"job {job_id} not found")
            self.store.append_logs(job_id, [dataclasses.replace(l, text=l.text[:MAX_LOG_LINE]) for l in lines], source,
                                   first_seq)
            self._touched.add(job_id)

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None:
        if not rows:
            return
        for row in rows:
            if not row.name or len(row.name) > MAX_METRIC_NAME:
                raise BadRequest(f"metric name {row.name[:40]!r}... must have 1-{MAX_METRIC_NAME} characters")
        with self._event():
            job = self.store.job(job_id)
            if job is None:
                raise NotFound(f"job {job_id} not found")
            self.store.append_metrics(job_id, [r for r in rows if not r.name.startswith(RECORD_PREFIX)], source,
                                      first_seq)
            for row in rows:
                self._record(job, row, now=row.time)

    # ---------------------------------------------------------------- jobs
    def submit(self, spec: JobSpec, now: float) -> tuple[str, str]:
        """Stores the job durably and schedules at once; returns (job id, state after scheduling).
        A spec whose submission id is already known returns that job: a retried submit is one job."""
        with self._event(durable=True):
            if spec.submission_id:
                known = self.store.job_by_submission(spec.submission_id)
                if known is not None:
                    return known.id, known.state.value
            nodes = self._nodes(include_busy=True)
            try:
                scheduler.check_feasible(spec.slots, nodes)
            except scheduler.InfeasibleJob as e:
                raise BadRequest(str(e)) from None
            largest = max((n.slots for n in nodes), default=0)
            if modes.planner(spec.distribution_mode).single_node and spec.slots > largest:
                raise BadRequest(f"distribution mode {spec.distribution_mode} runs one process on one node, but "
                                 f"slots_per_trial={spec.slots} is more than the largest node ({largest} slots); "
                                 "use mode mwms to span nodes")
            seq = self.store.next_job_seq()
            job_id = f"{seq}-{secrets.token_hex(2)}"
            self.store.insert_job(job_id, seq, spec, now, f"submitted: {spec.slots} slots")
            self._schedule(now)
            return job_id, self.store.job(job_id).state.value

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

    # ---------------------------------------------------------------- scheduling
    def _nodes(self, include_busy: bool = False) -> list[scheduler.Node]:
        used = self.allocs.used_slots()
        return [scheduler.Node(a.name, a.record.slots,
                               a.record.slots if include_busy else a.record.slots - used.get(a.name, 0))
                for a in self.agents.values() if not a.lost]

    def _schedule(self, now: float) -> None:
        # A job restarting waits until every node let its previous run go (one allocation per job and node).
        queued = [j for j in self.store.jobs([JobState.QUEUED]) if not self.allocs.of_job(j.id)]
        if not queued:
            self.waiting = {}
            return
        pending = [scheduler.PendingJob(j.id, j.spec.slots, j.spec.priority, j.seq) for j in queued]
        decision = scheduler.schedule(self._nodes(), pending)
        self.waiting = dict(decision.waiting)
        for assignment in decision.assignments:
            self._place(assignment, now)

    def _place(self, assignment: scheduler.Assignment, now: float) -> None:
        job = self.store.job(assignment.job_id)
        planner = modes.planner(job.spec.distribution_mode)
        names = [name for name, _ in assignment.nodes]
        try:
            addresses = placement_lib.choose_addresses({n: self.agents[n].record.addresses for n in names},
                                                       self.settings.subnet)
            counts = planner.ports_on([NodePlacement(name, addresses[name], slots, (), self.agents[name].record.gpu)
                                       for name, slots in assignment.nodes], job.spec.config)
            allocs = []
            for rank, ((name, slots), count) in enumerate(zip(assignment.nodes, counts)):
                record = self.agents[name].record
                gpus = placement_lib.choose_gpus([g.index for g in record.gpus], self.allocs.held_gpus(name),
                                                 slots) if record.gpu else ()
                allocs.append(Allocation(job.id, name, rank, slots, addresses[name],
                                         tuple(self._lease(name, count, job.id, set())), gpus))
        except placement_lib.PlacementError as e:
            self._end(job.id, policy.Outcome(JobState.FAILED, str(e), 1, restartable=False), now)
            return
        self.allocs.replace(job.id, allocs)
        self._start_clock[job.id] = now
        placed = ", ".join(f"{a.agent}:{a.slots}" + (f" (GPUs {','.join(map(str, a.gpus))})" if a.gpus else "")
                           for a in allocs)
        self._transition(job, JobState.STARTING, now, f"placed on {placed}", placement=allocs)

    def check_agents(self, now: float) -> None:
        """Declares silent agents lost (failing their jobs) and fails jobs whose start-up is overdue.
        Called periodically."""
        with self._event():
            for agent in self.agents.values():
                if agent.lost or now - agent.last_heartbeat <= self.settings.lost_after:
                    continue
                agent.lost = True
                self._update_heartbeat_interval()
                silence = now - agent.last_heartbeat
                log.warning("agent %s lost: no heartbeat for %.1fs", agent.name, silence)
                for alloc in self.allocs.on_agent(agent.name):
                    self._fail(alloc.job_id, now, policy.lost(agent.name, silence))
                    self._free(alloc.job_id, agent.name)
            for job_id, clock in list(self._start_clock.items()):
                self._check_startup(job_id, clock, now)
            for job_id in list(self._progress):
                self._check_progress(job_id, now)
            self._schedule(now)

    def _check_progress(self, job_id: str, now: float) -> None:
        """The step watchdog: a rank without progress past the job's step_timeout gets every rank's stacks
        dumped into the job's logs, and the job fails `stack_dump_grace` seconds later (time for them to ship)."""
        if job_id in self._stalled:
            outcome, fail_at = self._stalled[job_id]
            if now >= fail_at:
                self._fail(job_id, now, outcome)
            return
        job = self.store.job(job_id)
        plan = self._plan(job_id)
        if job is None or job.state != JobState.RUNNING or plan is None or not job.spec.step_timeout:
            return
        # Ranks that run the training loop: all of them, or in parameter-server mode the chief alone.
        trainers = [0] if plan.success is modes.SuccessRule.CHIEF else [p.rank for p in plan.processes]
        outcome = policy.stalled(self._progress[job_id], trainers, now, job.spec.step_timeout)
        if outcome is None:
            return
        log.warning("job %s: %s", job_id, outcome.message)
        self.store.update_job(job_id, now, f"{outcome.message.split(';')[0]}; dumping every rank's stacks")
        self._stalled[job_id] = (outcome, now + self.settings.stack_dump_grace)
        self._dump_to[job_id] = {a.agent for a in self.allocs.of_job(job_id)}
        self._touched.add(job_id)

    def _check_startup(self, job_id: str, clock: float, now: float) -> None:
        """A job leaves `_start_clock` once every rank joined (or it ended)."""
        job = self.store.job(job_id)
        plan = self._plan(job_id)
        if job is None or not job.state.active or plan is None:
            self._start_clock.pop(job_id, None)
            return
        joined = self._joined.get(job_id, set()) | {e.rank for e in self._exits(job_id)}
        if job.state == JobState.RUNNING and (plan.size <= 1 or joined >= set(range(plan.size))):
            self._start_clock.pop(job_id, None)
            return
        timeout = job.spec.startup_timeout or self.settings.startup_timeout
        outcome = policy.startup_overdue(plan.size, self.allocs.of_job(job_id), joined, clock, now, timeout)
        if outcome is not None:
            self._fail(job_id, now, outcome)

def _job_checkpoint_dir(job: Job) -> str:
    """Where the job's checkpoints go: <checkpoint_storage>/<job id> ("" when none is configured)."""
    return f"{job.spec.checkpoint_storage.rstrip('/')}/{job.id}" if job.spec.checkpoint_storage else ""

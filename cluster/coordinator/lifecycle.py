"""How a job's life goes on: placement (the scheduler's assignments made concrete), transitions,
failures (end, or restart the whole gang under max_restarts), preemption and resume, cancel, and
tfdist's own records shipped with the metrics (checkpoints, the preempted step).

`JobLifecycle` is constructed with everything it uses. Every method runs inside the coordinator
core's event (its lock and one store transaction); the decisions themselves are pure functions
(policy, scheduler, placement, exits)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Mapping, Sequence

from cluster.coordinator import exits as exits_lib, leases, placement as placement_lib, policy, scheduler, watchdogs
from cluster.coordinator import wait_reasons
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.capacity import LiveNodes
from cluster.coordinator.metrics import Telemetry
from cluster.coordinator.queue_index import QueueIndex, Round
from cluster.coordinator.scheduler import BlockedReasons
from cluster.coordinator.store import StateStore
from cluster.coordinator.values import AgentLive, BadRequest, Lookup, RunCache, Settings
from cluster.shared import modes
from cluster.shared.model import (Allocation, AllocState, Checkpoint, Job, JobState, LogLine, MetricRow, WorkerExit,
                                  check_job_transition)
from cluster.shared.modes import JobPlan, NodePlacement, Placement
from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, PREEMPTIBLE_RECORD

log = logging.getLogger("tfdist.coordinator")


class JobLifecycle:
    def __init__(self, store: StateStore, allocs: AllocationTable, agents: Mapping[str, AgentLive], run: RunCache,
                 settings: Settings, telemetry: Telemetry | None = None):
        self.telemetry = telemetry or Telemetry()
        self.store = store
        self.allocs = allocs
        self.agents = agents  # the core's, by name (lost ones too)
        self.run = run
        self.settings = settings
        self.queue = QueueIndex()  # the QUEUED jobs in scheduling order (queue_index.py)
        self.agents_version = 0  # bumped when a node joins, comes back or is lost (node_changed)
        self._last_round: Round | None = None
        self.reload_queue()
        self.live = LiveNodes(agents, allocs)  # the live nodes' free slots, as rounds place onto them

    def node_changed(self, name: str) -> None:
        """The core registered node `name` again or declared it lost."""
        self.agents_version += 1
        self.live.refresh([name])

    def reload_queue(self) -> None:
        """The queue index from the store (at start, and after an event rolled back)."""
        self.queue.load(pending(j) for j in self.store.jobs([JobState.QUEUED]))
        self._last_round = None

    # ---------------------------------------------------------------- what a job's run is
    def plan(self, job_id: str) -> JobPlan | None:
        """The job's launch plan (from its placement and spec), computed once per placement."""
        if job_id in self.run.plans:
            return self.run.plans[job_id]
        job = self.store.job(job_id)
        allocs = self.allocs.of_job(job_id) or (job.placement if job else ())
        if job is None or not allocs:
            return None
        gpu_nodes = {a.agent: bool(a.gpus) for a in allocs}
        latest = self.store.latest_checkpoint(job_id)
        placement = Placement(job_id, tuple(NodePlacement(a.agent, a.address, a.slots, a.ports, gpu_nodes[a.agent])
                                            for a in allocs), attempt=job.attempt,
                              checkpoint_dir=job_checkpoint_dir(job),
                              latest_checkpoint=(latest.path, latest.step) if latest else None)
        plan = modes.planner(job.spec.distribution_mode).plan(placement, job.spec.config, [a.gpus for a in allocs])
        self.run.plans[job_id] = plan
        return plan

    def exits(self, job_id: str) -> list[WorkerExit]:
        """The exits of the job's current run (earlier runs' exits are history)."""
        job = self.store.job(job_id)
        return self.store.exits(job_id, job.attempt) if job else []

    def ranks_on(self, job_id: str, agent: str) -> list[int]:
        alloc = self.allocs.get(job_id, agent)
        plan = self.plan(job_id)
        if alloc is None or plan is None:
            return []
        return [p.rank for p in plan.on_node(alloc.node_rank)]

    def nodes(self, include_busy: bool = False) -> list[scheduler.Node]:
        used = self.allocs.used_slots()
        return [scheduler.Node(a.name, a.record.slots,
                               a.record.slots if include_busy else a.record.slots - used.get(a.name, 0))
                for a in self.agents.values() if not a.lost]

    # ---------------------------------------------------------------- what the user asks
    def cancel(self, job: Job, now: float) -> None:
        if not job.terminal:
            self.end(job.id, policy.Outcome(JobState.CANCELED, "canceled by the user", 130), now)

    def preempt(self, job: Job, now: float) -> None:
        """Asks the job's workers to stop at a common step, save and exit (the job then PAUSES). A queued
        job pauses at once. Refused while the job's chief has not shown that it checks (tfdist's Checkpoint
        callback or ctx.should_preempt() tell the coordinator at their first step): nothing would stop."""
        if job.state == JobState.QUEUED:
            self.transition(job, JobState.PAUSED, now, "preempted before it was placed")
        elif job.state.active and not job.preemptible:
            raise BadRequest(f"job {job.id} cannot be preempted: its workers do not check for preemption "
                             "(tfdist.callbacks.Checkpoint, or ctx.should_preempt() in a custom loop) or have not "
                             f"finished their first step yet. `tfdist cancel {job.id}` stops it")
        elif job.state.active and not job.preempt_requested:
            self.store.update_job(job.id, now, "preemption requested: the workers stop and save at a common step",
                                  preempt_requested=1)
            self.run.touched.add(job.id)
            self.allocs.touch(job.id)  # its nodes hear it at once
        elif job.terminal:
            raise BadRequest(f"job {job.id} already ended ({job.state.value}); nothing to preempt")

    def resume(self, job: Job, now: float) -> None:
        """A paused job runs again (a new attempt), from its latest checkpoint."""
        if job.state != JobState.PAUSED:
            raise BadRequest(f"job {job.id} is {job.state.value}, not PAUSED; only a paused job can be resumed")
        latest = self.store.latest_checkpoint(job.id)
        where = f"from the checkpoint at step {latest.step}" if latest else "from the start (no checkpoint)"
        self.requeue(job, now, f"resumed {where}", restart=False)

    def record(self, job: Job, row: MetricRow, now: float) -> None:
        """tfdist's own records, shipped beside the metrics: a checkpoint the chief finished writing, the step
        a preempted run stopped at. Each is idempotent (a retried batch applies once)."""
        if row.name == CHECKPOINT_RECORD and row.note:
            attempt = int(row.value)
            if self.store.record_checkpoint(job.id, Checkpoint(row.step, row.note, attempt, now)):
                self.store.update_job(job.id, now, f"checkpoint at step {row.step}: {row.note}")
        elif row.name == PREEMPTIBLE_RECORD and int(row.value) == job.attempt and not job.preemptible:
            self.store.update_job(job.id, now, preemptible=1)
        elif row.name == PREEMPTED_RECORD and int(row.value) == job.attempt and job.preempted_step is None:
            self.store.update_job(job.id, now, f"preempted: every worker stops and saves at step {row.step}",
                                  preempted_step=row.step)

    # ---------------------------------------------------------------- applying decisions
    def apply(self, decision: exits_lib.JobDecision | None, job: Job, now: float) -> None:
        """Applies what the job's exits decided."""
        if decision is None:
            return
        if decision.action == exits_lib.JobAction.FAIL:
            self.fail(job.id, now, decision.outcome)
        elif decision.action == exits_lib.JobAction.PAUSE:
            self.pause(job, now)
        else:
            self.end(job.id, decision.outcome, now)

    def decide(self, job_id: str, now: float) -> None:
        """Applies the job's outcome once its exits decide it (the pure rule of its mode)."""
        job = self.store.job(job_id)
        plan = self.plan(job_id)
        if job is None or not job.state.active or plan is None:
            return
        self.apply(exits_lib.decide(job, plan, self.exits(job_id)), job, now)

    def fail(self, job_id: str, now: float, outcome: policy.Outcome) -> None:
        job = self.store.job(job_id)
        if job is None or job.terminal:
            return
        decision = policy.on_failure(outcome, job.restarts, job.spec.max_restarts)
        if decision.action == policy.FailureAction.RESTART and job.state.active:
            self.requeue(job, now, decision.message, restart=True)
        else:
            self.end(job_id, decision.outcome, now)

    def pause(self, job: Job, now: float) -> None:
        """Every worker saved at the preempted step and exited: the job holds nothing until resumed."""
        self.release(job.id)
        self.transition(job, JobState.PAUSED, now, f"stopped and saved at step {job.preempted_step}; "
                                                   f"`tfdist resume {job.id}` continues from there",
                        message=f"paused at step {job.preempted_step}")
        self.schedule(now)

    def requeue(self, job: Job, now: float, why: str, restart: bool) -> None:
        """The job's next run: its workers are stopped, and once every node let them go it is placed again
        (the same or other nodes) and starts from its latest checkpoint."""
        self.release(job.id)
        self.store.append_logs(job.id, [LogLine(-1, "stderr", f"tfdist: job {job.id}: {why}", now)])
        self.transition(job, JobState.QUEUED, now, why, attempt=job.attempt + 1,
                        restarts=job.restarts + (1 if restart else 0), preempt_requested=0, preempted_step=None,
                        preemptible=0, message=why)
        self.schedule(now)

    def release(self, job_id: str) -> None:
        """The job's nodes let go of it: its workers are stopped; a lost node holds nothing."""
        live = self.allocs.of_job(job_id)
        kept = [dataclasses.replace(a, state=AllocState.RELEASING) for a in live
                if a.agent in self.agents and not self.agents[a.agent].lost]
        self.allocs.replace(job_id, kept)
        self.run.forget(job_id)

    def end(self, job_id: str, outcome: policy.Outcome, now: float) -> None:
        job = self.store.job(job_id)
        if job is None or job.terminal:
            return
        live = self.allocs.of_job(job_id)
        recorded = {"placement": with_live(job.placement, live)} if live else {}
        self.transition(job, outcome.state, now, outcome.message, ended_at=now, message=outcome.message,
                        exit_code=outcome.exit_code, failed_rank=outcome.rank, **recorded)
        self.release(job_id)
        self.schedule(now)

    def transition(self, job: Job, new: JobState, now: float, event: str, **fields) -> None:
        check_job_transition(job.state, new)
        self.store.update_job(job.id, now, f"{new.value}: {event}", state=new, **fields)
        if new == JobState.QUEUED:
            self.queue.add(pending(job))
        elif job.state == JobState.QUEUED:
            self.queue.remove(job.id)
            self._last_round = None  # the nodes it kept (a reservation) may be free for others now
        self.telemetry.transition(job, new, now, fields)
        log.info("job %s %s: %s", job.id, new.value, event)
        self.run.touched.add(job.id)

    def maybe_running(self, job_id: str, now: float) -> None:
        job = self.store.job(job_id)
        if job and job.state == JobState.STARTING and \
                all(a.state == AllocState.STARTED for a in self.allocs.of_job(job_id)):
            self.transition(job, JobState.RUNNING, now, "every node started its workers", started_at=now)

    def free(self, job_id: str, agent: str) -> None:
        """The node let the job go: its slots, GPUs and ports are free."""
        self.allocs.replace(job_id, [a for a in self.allocs.of_job(job_id) if a.agent != agent])
        self.run.excluded_ports.pop((job_id, agent), None)
        if not self.allocs.of_job(job_id):
            self.run.plans.pop(job_id, None)
            self.run.joined.pop(job_id, None)
        self.run.touched.add(job_id)

    # ---------------------------------------------------------------- watchdogs
    def check_startup(self, job_id: str, clock: float, now: float) -> None:
        """A job leaves the start-up watch once every rank joined (or it ended)."""
        job = self.store.job(job_id)
        plan = self.plan(job_id)
        exited = {e.rank for e in self.exits(job_id)} if job and job.state.active and plan else set()
        check = watchdogs.startup(job, plan, self.run.joined.get(job_id, set()), exited, self.allocs.of_job(job_id),
                                  clock, now, self.settings.startup_timeout)
        if check.done:
            self.run.start_clock.pop(job_id, None)
            if self.run.joining.pop(job_id, None):
                self.run.touched.add(job_id)
        elif check.outcome is not None:
            self.telemetry.startup_timeouts.inc()
            self.fail(job_id, now, check.outcome)
        elif self.run.joining.get(job_id, "") != check.waiting:
            self.run.joining[job_id] = check.waiting  # followers print it (STARTING, or RUNNING until all joined)
            self.run.touched.add(job_id)

    def check_progress(self, job_id: str, now: float) -> None:
        """The step watchdog: a stalled job gets every rank's stacks dumped, then fails."""
        stalled = self.run.stalled.get(job_id)
        job = self.store.job(job_id) if stalled is None else None
        plan = self.plan(job_id) if stalled is None else None
        reported, left = self.run.progress.get(job_id, {}), self.run.left_training.get(job_id, set())
        check = watchdogs.progress(job, plan, reported, stalled, now, self.settings.stack_dump_grace,
                                   self.allocs.of_job(job_id), left)
        if check.outcome is not None and stalled is None and (exited := {e.rank for e in self.exits(job_id)}):
            # A rank that exited is not stalled (read only now: exits are rarely needed here).
            check = watchdogs.progress(job, plan, reported, None, now, self.settings.stack_dump_grace,
                                       self.allocs.of_job(job_id), left | exited)
        if check.fail_now:
            self.fail(job_id, now, check.outcome)
        elif check.outcome is not None:
            log.warning("job %s: %s", job_id, check.outcome.message)
            self.store.update_job(job_id, now, f"{check.outcome.message.split(';')[0]}; dumping every rank's stacks")
            self.run.stalled[job_id] = (check.outcome, check.fail_at)
            self.telemetry.stalls.inc()
            self.run.dump_to[job_id] = {a.agent for a in self.allocs.of_job(job_id)}
            self.run.touched.add(job_id)

    # ---------------------------------------------------------------- scheduling
    def schedule(self, now: float, submitted: scheduler.PendingJob | None = None) -> None:
        """A scheduling round over the queue. `submitted`: the one job queued since the last round; when
        nothing freed or joined since and that round left no free slot it could take, there is no round."""
        if not self.queue:
            self.run.waiting = {}
            self._last_round = None
            return
        if submitted is not None and self._last_round is not None and isinstance(self.run.waiting, BlockedReasons) \
                and self._last_round.places_nothing_more(self.allocs.version, self.agents_version, submitted):
            self.run.waiting.add(submitted)
            return
        # A job restarting waits until every node let its previous run go (one allocation per job and node).
        holding = [job_id for job_id in self.allocs.jobs() if job_id in self.queue]
        started = time.perf_counter()
        decision = scheduler.schedule(self.live.index, self.queue.jobs(), lambda: surroundings(self.allocs, self.agents, self.store, now), ordered=True,
                                      skip=holding, current=lambda j: j in self.queue and not self.allocs.of_job(j))
        self.telemetry.rounds.observe(time.perf_counter() - started)
        self.run.waiting = decision.waiting
        failed = sum(not self.place(assignment, now) for assignment in decision.assignments)
        self._last_round = None if failed else Round(self.allocs.version, self.agents_version, decision.settled,
                                                     decision.reserver_priority)

    def place(self, assignment: scheduler.Assignment, now: float) -> bool:
        """Makes the assignment concrete (addresses, GPUs, ports); False if it could not be (the job fails)."""
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
                                         tuple(self.lease(name, count, job.id, set())), gpus))
        except placement_lib.PlacementError as e:
            self.end(job.id, policy.Outcome(JobState.FAILED, str(e), 1, restartable=False), now)
            return False
        self.allocs.replace(job.id, allocs)
        self.run.start_clock[job.id] = now
        placed = ", ".join(f"{a.agent}:{a.slots}" + (f" (GPUs {','.join(map(str, a.gpus))})" if a.gpus else "")
                           for a in allocs)
        self.transition(job, JobState.STARTING, now, f"placed on {placed}", placement=allocs)
        return True

    def lease(self, agent: str, count: int, job_id: str, excluded: set[int]) -> list[int]:
        return leases.lease(count, self.settings.port_range, self.ports_in_use(agent, job_id), excluded)

    def ports_in_use(self, agent: str, job_id: str) -> list[int]:
        """The ports the node's other jobs hold."""
        return [p for a in self.allocs.on_agent(agent) if a.job_id != job_id for p in a.ports]


def surroundings(allocs: AllocationTable, agents: Mapping[str, AgentLive], store: StateStore,
                 now: float) -> wait_reasons.Surroundings:
    """What a queued job's reason names besides free slots: who holds each node, the lost nodes."""
    holders: dict[str, list[wait_reasons.Holder]] = {}
    for a in allocs.all():
        holders.setdefault(a.agent, []).append(wait_reasons.Holder(a.job_id, a.state == AllocState.RELEASING))
    lost = tuple(wait_reasons.LostNode(a.name, a.record.slots, now - a.last_heartbeat)
                 for a in list(agents.values()) if a.lost)  # copied in one step: listings read without the lock
    return wait_reasons.Surroundings({k: tuple(v) for k, v in holders.items()}, lost,
                                     Lookup(lambda job_id: (job := store.job(job_id)) and job.spec.name))


def pending(job: Job) -> scheduler.PendingJob:
    """What the scheduler needs of a queued job."""
    return scheduler.PendingJob(job.id, job.spec.slots, job.spec.priority, job.seq)


def with_live(placement: Sequence[Allocation], live: Sequence[Allocation]) -> list[Allocation]:
    """The job's placement as recorded, with the live allocations' states and ports where it holds nodes."""
    by_agent = {a.agent: a for a in live}
    return [by_agent.get(a.agent, a) for a in placement]


def job_checkpoint_dir(job: Job) -> str:
    """Where the job's checkpoints go: <checkpoint_storage>/<job id> ("" when none is configured)."""
    return f"{job.spec.checkpoint_storage.rstrip('/')}/{job.id}" if job.spec.checkpoint_storage else ""

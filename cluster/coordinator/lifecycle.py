"""The executor of a job's state machine: `handle(job, event)` reads what job_machine.step needs, keeps the
run it returns and applies its actions (transitions, holding and releasing nodes, log lines, scheduling
rounds); beside it, the scheduling round and the placement that makes its assignments concrete, and tfdist's
own records shipped with the metrics (checkpoints, the preempted step).

`JobLifecycle` is constructed with everything it uses. Every method runs inside the coordinator core's
event (its lock and one store transaction, which a failed event rolls back with the runs); what to do is
decided by pure functions (job_machine, scheduler, placement)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Mapping, Sequence

from collections import Counter

from cluster.coordinator import growth, job_machine, placement as placement_lib, scheduler, wait_reasons
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.engine import NodesExpected
from cluster.coordinator.handover import Handover
from cluster.coordinator.capacity import LiveNodes
from cluster.coordinator.metrics import Telemetry
from cluster.coordinator.queue_index import QueueIndex, Round
from cluster.coordinator.scheduler import BlockedReasons
from cluster.coordinator.store import StateStore
from cluster.coordinator.run_state import NOTHING, Runs
from cluster.coordinator.values import AgentLive, Lookup, Settings
from cluster.shared import diagnose_variant, modes
from cluster.shared.model import (Allocation, AllocState, Checkpoint, Job, JobState, LogLine, MetricRow, WorkerExit,
                                  check_job_transition)
from cluster.shared.modes import JobPlan, NodePlacement, Placement
from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, PREEMPTIBLE_RECORD

log = logging.getLogger("tfdist.coordinator")
NEEDS_PLAN = (job_machine.Adopted, job_machine.Exited, job_machine.DeadlineCheck)  # the events whose step reads it


class JobLifecycle:
    def __init__(self, store: StateStore, allocs: AllocationTable, agents: Mapping[str, AgentLive], runs: Runs,
                 settings: Settings, telemetry: Telemetry | None = None):
        self.telemetry = telemetry or Telemetry()
        self.store = store
        self.allocs = allocs
        self.agents = agents  # the core's, by name (lost ones too)
        self.runs = runs
        self.settings = settings
        self.queue = QueueIndex()  # the QUEUED jobs in scheduling order (queue_index.py)
        self.agents_version = 0  # bumped when a node joins, comes back or is lost (node_changed)
        self._last_round: Round | None = None
        self._in_round = self._round_again = False  # schedule() asked again while a round places (see there)
        self.reload_queue()
        self.live = LiveNodes(agents, allocs)  # the live nodes' free slots, as rounds place onto them
        # The engine's Engine.peer_addresses (set as it attaches): (the job, its run's nodes) -> node -> address
        # where the engine names them per job (Kubernetes: each pod's DNS name); None: the nodes' own addresses.
        self.addresses_of_job: Callable[[Job, Sequence[str]], Mapping[str, str] | None] | None = None
        # Who hears of every job's transitions (job, its new state, when), in the event that made them:
        # `subscribe` (the experiments runner: a trial's searcher hears of it at the event's end).
        self._transition_listeners: list[Callable[[Job, JobState, float], None]] = []
        self.handover: Handover | None = None  # an engine that places gangs itself: queued runs go to it
        # Nodes the engine's cluster may still add (EngineHost.nodes_expected), and where the queue's lack of
        # them is told after each round (Engine.demand, set as it attaches), what was told last.
        self.expected: tuple[NodesExpected, ...] = ()
        self.demand_to: Callable[[Mapping[int, int]], None] | None = None
        self._told: dict[int, int] = {}

    def node_changed(self, name: str) -> None:
        """The core registered node `name` again or declared it lost."""
        self.agents_version += 1
        self.live.refresh([name])

    def expect(self, expected: tuple[NodesExpected, ...]) -> bool:
        """The nodes the engine's cluster may still add, from now on; False if that is what it said before."""
        if expected == self.expected:
            return False
        self.expected, self._last_round = expected, None
        return True

    def sizes(self) -> Counter[int]:
        """How many nodes of each size a job may count on: the live ones (busy or not) and the expected."""
        return growth.with_expected(self.live.index.sizes, self.expected)

    def _tell_demand(self) -> None:
        """After a round: how many of the expected nodes the queued jobs lack, told to the engine if changed."""
        if self.demand_to is None or not (self.expected or self._told):
            return
        idle = Counter(n.slots for n in self.live.index.nodes.values() if n.free_slots == n.slots) \
            if self.expected and self.queue else Counter()
        lack = growth.missing_nodes(self.queue.jobs(), idle, self.expected) if self.expected else {}
        if lack != self._told:
            self._told = lack
            self.demand_to(lack)

    def reload_queue(self) -> None:
        """The queue index from the store (at start, and after an event rolled back)."""
        self.queue.load(pending(j) for j in self.store.jobs([JobState.QUEUED]))
        self._last_round = None

    # ---------------------------------------------------------------- what a job's run is
    def plan(self, job_id: str) -> JobPlan | None:
        """The job's launch plan (from its placement and spec), computed once per placement."""
        cached = self.runs.get(job_id).plan
        if cached is not None:
            return cached
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
        self.runs.update(job_id, plan=plan)
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

    # ---------------------------------------------------------------- the job's state machine
    def handle(self, job_id: str, event: job_machine.Event, now: float) -> None:
        """One step of the job's state machine (job_machine.py): reads the facts it needs, keeps the run it
        returns and applies its actions, in order. A job the store no longer has keeps no run."""
        if isinstance(event, job_machine.RUN_ONLY):  # every heartbeat of a running job: no store read
            self._keep(job_id, job_machine.run_step(self.runs.get(job_id), self.allocs.of_job(job_id), event, now))
            return
        job = self.store.job(job_id)
        if job is None:
            self.runs.put(job_id, NOTHING)
            return
        plan = self.plan(job_id) if isinstance(event, NEEDS_PLAN) else None
        facts = job_machine.Facts(job, self.allocs.of_job(job_id), plan, lambda: self.exits(job_id),
                                  lambda: self.store.latest_checkpoint(job_id), self.settings.startup_timeout,
                                  self.settings.stack_dump_grace, lambda: self.store.log_count(job_id),
                                  lambda seq: self.store.logs(job_id, seq, -1, stack_lines(plan)))
        result = job_machine.step(facts, self.runs.get(job_id), event, now)
        self._keep(job_id, result)
        for action in result.actions:
            self._apply(job, action, now)

    def _keep(self, job_id: str, result: job_machine.Step) -> None:
        self.runs.put(job_id, result.run)
        if result.touched:
            self.runs.touched.add(job_id)

    def _apply(self, job: Job, action: job_machine.Action, now: float) -> None:
        match action:
            case job_machine.SetState(state, event, fields):
                self.transition(job, state, now, event, **fields)
            case job_machine.Note(event, fields):
                self.store.update_job(job.id, now, event, **fields)
            case job_machine.LogLine(text):
                self.store.append_logs(job.id, [LogLine(-1, "stderr", text, now)])
            case job_machine.Hold(allocations):
                self.allocs.replace(job.id, list(allocations))
            case job_machine.Release():
                self.release(job.id)
            case job_machine.TellNodes():
                self.allocs.touch(job.id)
            case job_machine.Schedule():
                self.schedule(now)
            case job_machine.Count(what):
                getattr(self.telemetry, what).inc()
            case job_machine.Warn(text):
                log.warning("%s", text)

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

    # ---------------------------------------------------------------- applying actions
    def release(self, job_id: str) -> None:
        """The job's nodes let go of it: its workers are stopped; a lost node holds nothing."""
        live = self.allocs.of_job(job_id)
        kept = [dataclasses.replace(a, state=AllocState.RELEASING) for a in live
                if a.agent in self.agents and not self.agents[a.agent].lost]
        self.allocs.replace(job_id, kept)

    def subscribe(self, listener: Callable[[Job, JobState, float], None]) -> None:
        """`listener(job, new state, now)` after each job's transition, inside its event (one transaction)."""
        self._transition_listeners.append(listener)

    def hand_over(self, handover: Handover) -> None:
        """From now on queued runs are handed to the engine (handover.py), not placed by the scheduler."""
        self.handover = handover
        self.subscribe(lambda job, state, now: handover.transition(job, state))

    def transition(self, job: Job, new: JobState, now: float, event: str, **fields) -> None:
        check_job_transition(job.state, new)
        self.store.update_job(job.id, now, f"{new.value}: {event}", state=new, **fields)
        if new == JobState.QUEUED:
            self.queue.add(pending(job))
        elif job.state == JobState.QUEUED:
            self.queue.remove(job.id)
            self._last_round = None  # the nodes it kept (a reservation) may be free for others now
        self.telemetry.transition(job, new, now, fields)
        for listener in self._transition_listeners:
            listener(job, new, now)
        log.info("job %s %s: %s", job.id, new.value, event)
        self.runs.touched.add(job.id)

    def free(self, job_id: str, agent: str) -> None:
        """The node let the job go: its slots, GPUs and ports are free."""
        self.allocs.replace(job_id, [a for a in self.allocs.of_job(job_id) if a.agent != agent])
        self.handle(job_id, job_machine.Freed(agent), 0.0)

    # ---------------------------------------------------------------- scheduling
    def schedule(self, now: float, submitted: scheduler.PendingJob | None = None) -> None:
        """A scheduling round over the queue. `submitted`: the one job queued since the last round; when
        nothing freed or joined since and that round left no free slot it could take, there is no round.
        Asked during a round (a placement that failed ends its job, whose step asks for a round): that
        round's other assignments are placed first, once, and then one more round takes what was freed (a
        nested round placed them too, and the outer one then placed a STARTING job again: InvalidTransition,
        every such event rolled back)."""
        if self._in_round:
            self._round_again = True
            return
        self._in_round = True
        try:
            self._round(now, submitted)
            while self._round_again:
                self._round_again = False
                self._round(now, None)
        finally:
            self._in_round = self._round_again = False

    def _round(self, now: float, submitted: scheduler.PendingJob | None) -> None:
        if not self.queue:
            self.runs.set_waiting({})
            self._last_round = None
            self._tell_demand()
            return
        if submitted is not None and self._last_round is not None and isinstance(self.runs.waiting, BlockedReasons) \
                and self._last_round.places_nothing_more(self.allocs.version, self.agents_version, submitted):
            self.runs.waiting.add(submitted)
            self._tell_demand()
            return
        # A job restarting waits until every node let its previous run go (one allocation per job and node).
        holding = [job_id for job_id in self.allocs.jobs() if job_id in self.queue]
        if self.handover is not None:  # the engine places: each queued run is handed over once
            self.runs.set_waiting(self.handover.round(self.queue.jobs(), holding, self.store.job))
            self._last_round = None
            return
        started = time.perf_counter()
        decision = scheduler.schedule(self.live.index, self.queue.jobs(),
                                      lambda: surroundings(self.allocs, self.agents, self.store, now, self.expected),
                                      ordered=True,
                                      skip=holding, current=lambda j: j in self.queue and not self.allocs.of_job(j))
        self.telemetry.rounds.observe(time.perf_counter() - started)
        self.runs.set_waiting(decision.waiting)
        failed = sum(not self.place(assignment, now) for assignment in decision.assignments)
        self._tell_demand()
        self._last_round = None if failed else Round(self.allocs.version, self.agents_version, decision.settled,
                                                     decision.reserver_priority)

    def place(self, assignment: scheduler.Assignment, now: float) -> bool:
        """Makes the assignment concrete (addresses, GPUs, ports); False if it could not be (the job fails)."""
        job = self.store.job(assignment.job_id)
        planner = modes.planner(job.spec.distribution_mode)
        names = [name for name, _ in assignment.nodes]
        try:
            addresses = (self.addresses_of_job(job, names) if self.addresses_of_job is not None else None) or \
                placement_lib.choose_addresses({n: self.agents[n].record.addresses for n in names},
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
            self.handle(job.id, job_machine.PlacementFailed(str(e)), now)
            return False
        self.handle(job.id, job_machine.Placed(tuple(allocs)), now)
        return True

    def lease(self, agent: str, count: int, job_id: str, excluded: set[int]) -> list[int]:
        return placement_lib.choose_ports(count, self.settings.port_range, self.ports_in_use(agent, job_id), excluded)

    def ports_in_use(self, agent: str, job_id: str) -> list[int]:
        """The ports the node's other jobs hold."""
        return [p for a in self.allocs.on_agent(agent) if a.job_id != job_id for p in a.ports]


def surroundings(allocs: AllocationTable, agents: Mapping[str, AgentLive], store: StateStore,
                 now: float, expected: Sequence[NodesExpected] = ()) -> wait_reasons.Surroundings:
    """What a queued job's reason names besides free slots: who holds each node, the lost nodes, the nodes
    the cluster may still add."""
    holders: dict[str, list[wait_reasons.Holder]] = {}
    for a in allocs.all():
        holders.setdefault(a.agent, []).append(wait_reasons.Holder(a.job_id, a.state == AllocState.RELEASING))
    lost = tuple(wait_reasons.LostNode(a.name, a.record.slots, now - a.last_heartbeat)
                 for a in list(agents.values()) if a.lost)  # copied in one step: listings read without the lock
    return wait_reasons.Surroundings({k: tuple(v) for k, v in holders.items()}, lost,
                                     Lookup(lambda job_id: (job := store.job(job_id)) and job.spec.name),
                                     tuple(wait_reasons.ExpectedNodes(e.slots, e.count, e.why) for e in expected
                                           if e.count > 0))


def stack_lines(plan: JobPlan | None) -> int:
    """How much of a stalled job's log is read for its ranks' stacks: a dump is tens of lines a rank."""
    return max(20000, 400 * (plan.size if plan else 0))


def pending(job: Job) -> scheduler.PendingJob:
    """What the scheduler needs of a queued job."""
    return scheduler.PendingJob(job.id, job.spec.slots, job.spec.priority, job.seq,
                                diagnose_variant.pinned_nodes(job.spec.config.diagnose))


def job_checkpoint_dir(job: Job) -> str:
    """Where the job's checkpoints go: <checkpoint_storage>/<job id> ("" when none is configured)."""
    return f"{job.spec.checkpoint_storage.rstrip('/')}/{job.id}" if job.spec.checkpoint_storage else ""

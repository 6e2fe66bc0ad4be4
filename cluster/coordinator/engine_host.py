"""The job side's half of the engine contract (cluster/coordinator/engine.py): what an engine may ask and say,
each applied here as one of the coordinator's events. The core's tables (nodes, allocations, runs, the
lifecycle) stay behind these methods; an engine sees none of them."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Sequence

from cluster.coordinator import job_machine, policy
from cluster.coordinator.handover import placement_problem
from cluster.coordinator.values import Settings
from cluster.coordinator.scheduler import Assignment
from cluster.coordinator.engine import (CouldNotStart, Disrupted, GangEvent, GangFailed, GangHeld, GangReady,
                                        NodesExpected, NodeVanished, NodeView)
from cluster.shared.model import AgentRecord, Allocation, Job, JobState, LogLine, MetricRow, WorkerExit
from cluster.shared.work import AgentReport, RunningJob, Work
from tfdist.errors import InternalError


class CoreHost:
    """The core as its engine's host (`core.host`): what the contract lets an engine do, nothing more."""

    def __init__(self, core: Any):
        self.core = core

    @property
    def settings(self) -> Settings:
        return self.core.settings

    # ------------------------------------------------------------ nodes
    def register_node(self, record: AgentRecord, running: Sequence[RunningJob], leased: Iterable[str], now: float,
                      watched: bool = True, held_elsewhere: int = 0, metrics_address: str = "") -> None:
        self.core.nodes.register(record, running, leased, now, watched, held_elsewhere, metrics_address)

    def node_report(self, report: AgentReport, now: float) -> Work | None:
        return self.core.nodes.heartbeat(report, now)

    def node_held_elsewhere(self, name: str, slots: int, now: float) -> None:
        self.core.nodes.held_elsewhere(name, slots, now)

    def node_withdrawn(self, name: str, why: str, now: float) -> None:
        with self.core.event():
            if name in self.core.agents:
                self.core.node_lost(name, policy.Outcome(JobState.FAILED, why, 1), now)
            self.core.lifecycle.schedule(now)

    def node_seen(self, name: str, now: float, beacons: bool = False) -> bool:
        return self.core.nodes.seen(name, now, beacons)

    def check_silent(self, now: float) -> list[str]:
        return self.core.nodes.check_lost(now)

    def node_count(self) -> int:
        return len(self.core.lifecycle.live.index.nodes)  # one read of a dict's size: no lock

    def node(self, name: str) -> NodeView | None:
        return self.core.agents.get(name)

    def holds(self, name: str) -> bool:
        return bool(self.core.allocs.on_agent(name))

    def work_version(self, name: str) -> int:
        return self.core.agent_board.version(name)

    def on_work_changed(self, listener: Callable[[Iterable[str]], None]) -> None:
        self.core.on_work_changed(listener)

    # ------------------------------------------------------------ what a node's workers produce
    def report_exit(self, agent: str, job_id: str, exit_: WorkerExit, now: float) -> None:
        self.core.report_exit(agent, job_id, exit_, now)

    def push_logs(self, agent: str, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> None:
        self.core.push_logs(agent, job_id, lines, source, first_seq)

    def push_metrics(self, agent: str, job_id: str, rows: list[MetricRow], source: str = "",
                     first_seq: int = 0) -> None:
        self.core.push_metrics(agent, job_id, rows, source, first_seq)

    # ------------------------------------------------------------ gangs
    def placement(self, job_id: str) -> tuple[Allocation, ...]:
        return tuple(self.core.allocs.of_job(job_id))

    def job(self, job_id: str) -> Job | None:
        return self.core.engine_reader.job(job_id)

    def gang_event(self, job_id: str, event: GangEvent, now: float | None = None) -> None:
        with self.core.event():  # its time read under the lock: in order with the job's other events
            self.core.lifecycle.handle(job_id, self._job_event(job_id, event), time.time() if now is None else now)

    def gang_placed(self, job_id: str, attempt: int, nodes: Sequence[tuple[str, int]], now: float) -> str:
        with self.core.event():
            lifecycle = self.core.lifecycle
            if lifecycle.handover is None:
                return "this coordinator's engine does not place gangs (Engine.places_gangs)"
            free = {n.name: n.free_slots for n in lifecycle.live.index.nodes.values()}
            chosen = tuple((name, int(slots)) for name, slots in nodes)
            why = placement_problem(self.core.store.job(job_id), attempt, lifecycle.handover.handed, chosen, free)
            if not why:
                lifecycle.place(Assignment(job_id, chosen), now)
            return why

    def gang_waiting(self, job_id: str, attempt: int, why: str, now: float) -> bool:
        with self.core.event():
            lifecycle = self.core.lifecycle
            if lifecycle.handover is None or not lifecycle.handover.waiting(job_id, attempt, why):
                return False
            lifecycle.schedule(now)  # the waiting reasons, again
            return True

    def nodes_expected(self, expected: Sequence[NodesExpected], now: float) -> None:
        with self.core.event():
            if self.core.lifecycle.expect(tuple(expected)):
                self.core.lifecycle.schedule(now)  # the waiting reasons and the demand, again

    def _job_event(self, job_id: str, event: GangEvent) -> job_machine.Event:
        """Under the lock: the job machine's event for what the engine said."""
        if isinstance(event, GangReady):
            return job_machine.NodesReady()
        if isinstance(event, GangHeld):
            return job_machine.NodesHeld(event.why)
        if isinstance(event, CouldNotStart):
            return job_machine.NotStarted(event.why)
        if isinstance(event, Disrupted):
            return job_machine.Disrupted(event.why)
        if isinstance(event, NodeVanished):
            return job_machine.Failed(policy.vanished(event.node, self.core.lifecycle.ranks_on(job_id, event.node), event.why))
        if isinstance(event, GangFailed):
            return job_machine.Failed(policy.Outcome(JobState.FAILED, f"job {job_id}: {event.why}", 1,
                                                     restartable=event.restartable))
        raise InternalError(f"not an engine's event: {event!r}")

"""Applies a node's answers to a job's start-up handshake, its port check and its peer probes, to the job's
allocations: leases.py decides what an answer means (pure), this writes it. Called inside a heartbeat's
event, under the coordinator's lock."""

from __future__ import annotations

from typing import Sequence

from cluster.coordinator import job_machine, leases, policy
from cluster.coordinator.allocations import AllocationTable
from cluster.coordinator.job_machine import with_live
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.run_state import Runs
from cluster.coordinator.store import StateStore
from cluster.coordinator.values import Settings
from cluster.shared.work import ProbeFailure


class Handshake:
    def __init__(self, store: StateStore, allocs: AllocationTable, lifecycle: JobLifecycle, runs: Runs,
                 settings: Settings):
        self.store, self.allocs, self.lifecycle, self.runs, self.settings = store, allocs, lifecycle, runs, settings

    def port_result(self, job_id: str, agent: str, busy: list[int], now: float) -> None:
        excluded = self.runs.get(job_id).excluded_ports.get(agent, frozenset()) | set(busy)
        decision = leases.port_answer(self.allocs.get(job_id, agent), self.allocs.of_job(job_id), busy, excluded,
                                      self.lifecycle.ports_in_use(agent, job_id), self.settings.port_range)
        if decision is None:
            return  # a repeated or late answer
        if busy:
            self.lifecycle.handle(job_id, job_machine.PortsBusy(agent, frozenset(busy)), now)
        if decision.state is not None:
            self.allocs.update(job_id, agent, state=decision.state)
        elif decision.outcome is not None:
            self.lifecycle.handle(job_id, job_machine.Failed(decision.outcome), now)
        else:
            # No peer has probed yet: probes wait until every node of the job holds its ports.
            self.allocs.update(job_id, agent, ports=decision.ports)
            self.runs.update(job_id, plan=None)  # its plan names the ports
            job = self.store.job(job_id)
            self.store.update_job(job_id, now, f"ports {busy} busy on {agent}; leased {list(decision.ports)} instead",
                                  placement=with_live(job.placement, self.allocs.of_job(job_id)))

    def probe_result(self, job_id: str, agent: str, failures: Sequence[ProbeFailure], now: float) -> None:
        answer = leases.probe_answer(self.allocs.get(job_id, agent), self.allocs.of_job(job_id), failures)
        if isinstance(answer, policy.Outcome):
            self.lifecycle.handle(job_id, job_machine.Failed(answer), now)
        elif answer is not None:
            self.allocs.update(job_id, agent, state=answer)

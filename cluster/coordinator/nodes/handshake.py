"""Applies a node's answers to a job's start-up handshake, its port check and its peer probes, to the job's
allocations: port_checks.py decides what an answer means (pure), this writes it. Called inside a heartbeat's
event, under the coordinator's lock."""

from __future__ import annotations

from typing import Any, Sequence

from cluster.coordinator import job_machine, policy
from cluster.coordinator.job_machine import with_live
from cluster.coordinator.nodes import port_checks
from cluster.shared.work import ProbeFailure


class Handshake:
    def __init__(self, host: Any):
        self.store, self.allocs, self.lifecycle, self.runs, self.settings = \
            host.store, host.allocs, host.lifecycle, host.runs, host.settings

    def port_result(self, job_id: str, agent: str, busy: list[int], now: float) -> None:
        excluded = self.runs.get(job_id).excluded_ports.get(agent, frozenset()) | set(busy)
        decision = port_checks.port_answer(self.allocs.get(job_id, agent), self.allocs.of_job(job_id), busy, excluded,
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
            if job is not None:  # its allocation is held: the job is there
                self.store.update_job(job_id, now, f"ports {busy} busy on {agent}; leased {list(decision.ports)} "
                                      "instead", placement=with_live(job.placement, self.allocs.of_job(job_id)))

    def probe_result(self, job_id: str, agent: str, failures: Sequence[ProbeFailure], now: float) -> None:
        answer = port_checks.probe_answer(self.allocs.get(job_id, agent), self.allocs.of_job(job_id), failures)
        if isinstance(answer, policy.Outcome):
            self.lifecycle.handle(job_id, job_machine.Failed(answer), now)
        elif answer is not None:
            self.allocs.update(job_id, agent, state=answer)

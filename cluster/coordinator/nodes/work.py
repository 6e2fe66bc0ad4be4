"""What an agent should do now, decided from the durable state on every heartbeat (level-triggered:
nothing a restart could lose). Pure: the core hands in what it knows and sends back what this returns.

An allocation's state says the step: LEASING -> check its ports; LEASED on every node -> probe the
peers' ports; REACHABLE (or STARTED) everywhere -> start this node's workers; STARTED on the node that
serves the job's store -> carry a preemption request. What the node runs or holds without a live
allocation is stopped (quickly when the job failed: its collectives are broken anyway)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Iterable, Mapping, Sequence

from cluster.coordinator.values import AgentLive, Reads, Settings
from cluster.shared.work import ProbeTask, StartTask, Work
from cluster.shared.model import Allocation, AllocState, Job, JobState
from cluster.shared.modes import JobPlan

# Settings.store_key is empty only where no daemon derived one (a core built by hand, e.g. in a test): the
# store secrets then come from a key made once per coordinator process (a restart changes them, so a run
# that had started on some nodes and not on others cannot reach its store from the late ones).
_PROCESS_STORE_KEY = secrets.token_bytes(32)
_PORTS_HELD = (AllocState.LEASED, AllocState.REACHABLE)
_REACHED = (AllocState.REACHABLE, AllocState.STARTED)


def work_for(agent: AgentLive, allocations: Mapping[str, Sequence[Allocation]], jobs: Reads[str, Job],
             plans: Reads[str, JobPlan], settings: Settings, dump_stacks: Iterable[str] = ()) -> Work:
    """The agent's work. `allocations`: job -> all of its allocations, for each job holding this agent
    (in the order the agent's allocations are listed). `jobs`, `plans`: by job id, read with `.get` only
    (a missing job or plan gives no start). `dump_stacks`: jobs whose stacks this agent must dump."""
    work = Work()
    held: dict[str, Allocation] = {}
    for job_id, job_allocs in allocations.items():
        alloc = next((a for a in job_allocs if a.agent == agent.name), None)
        if alloc is None:
            continue
        held[job_id] = alloc
        # The job is read only where the work needs it (a heartbeat reads no job row for a run going on).
        if alloc.state == AllocState.LEASING:
            job = jobs.get(job_id)
            work.check_ports.append((job_id, alloc.ports))
            if job is not None:
                work.attempts[job_id] = job.attempt
        elif alloc.state == AllocState.LEASED and all(a.state in _PORTS_HELD for a in job_allocs):
            targets = tuple((a.agent, a.address, p) for a in job_allocs if a.agent != alloc.agent for p in a.ports)
            work.probes.append(ProbeTask(job_id, targets, settings.probe_timeout))
        elif alloc.state == AllocState.REACHABLE and job_id not in agent.running and \
                all(a.state in _REACHED for a in job_allocs):
            start = start_task(alloc, jobs.get(job_id), plans.get(job_id), settings)
            if start:
                work.start.append(start)
        elif alloc.state == AllocState.STARTED and serves_store(alloc, plans.get(job_id)):
            job = jobs.get(job_id)
            if job is not None and job.preempt_requested and job.state.active:
                work.preempt.append(job_id)
    work.dump_stacks.extend(dump_stacks)
    for job_id in sorted(set(agent.running) | agent.leased):
        alloc = held.get(job_id)
        if alloc is None or alloc.state == AllocState.RELEASING:
            work.stop_jobs.append(job_id)
            job = jobs.get(job_id)
            failed = job is not None and job.state == JobState.FAILED
            work.stop_grace[job_id] = settings.failure_grace if failed else settings.stop_grace
    return work


def serves_store(alloc: Allocation, plan: JobPlan | None) -> bool:
    """Whether the node of `alloc` serves the job's key-value store (where a preemption request goes)."""
    return plan is not None and plan.store is not None and plan.store[0] == alloc.node_rank


def start_task(alloc: Allocation, job: Job | None, plan: JobPlan | None, settings: Settings) -> StartTask | None:
    """What the node of `alloc` starts of the job's current run: its share of the plan."""
    if job is None or plan is None:
        return None
    store = plan.store[1] if plan.store is not None and serves_store(alloc, plan) else 0
    return StartTask(job_id=job.id, working_dir=job.spec.working_dir, command=job.spec.entrypoint,
                     processes=plan.on_node(alloc.node_rank), failure_grace=settings.failure_grace,
                     store_port=store, attempt=job.attempt, store_secret=store_secret(settings, job.id, job.attempt))


def store_secret(settings: Settings, job_id: str, attempt: int) -> str:
    """The secret of one run's key-value store, the same on every node and after a coordinator restart:
    HMAC-SHA256(store_key, "job_id/attempt") in hex. Every node gets it (its workers send it), only the
    node serving the store checks it."""
    key = settings.store_key or _PROCESS_STORE_KEY
    return hmac.new(key, f"{job_id}/{attempt}".encode(), hashlib.sha256).hexdigest()

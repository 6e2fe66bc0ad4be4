"""What a node's report or its silence means for the jobs it holds. Pure: each function returns
decisions; the core applies them in its event, in order.

A registration or heartbeat says what the node runs and which ports it holds; each of its
allocations is brought in line with that (`reconcile`). Afterwards what ended and the node no
longer holds frees its slots (`released`). A node silent past `lost_after` is lost (`lost_agents`)
and every job it held fails (policy.lost)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Collection, Iterable, Mapping, Sequence

from cluster.coordinator import policy
from cluster.coordinator.values import AgentLive, Reads
from cluster.shared.model import Allocation, AllocState

RESTARTED = "restarted (its agent registered again without the job's workers)"
_PORTS_HELD = (AllocState.LEASED, AllocState.REACHABLE)


class Action(str, enum.Enum):
    JOINED = "JOINED"  # the node runs the job's current run: note who joined
    STARTED = "STARTED"  # ... and that proves its start: the allocation becomes STARTED
    LEASE_AGAIN = "LEASE_AGAIN"  # it lost its leased ports before anything started: every node leases again
    FAIL = "FAIL"  # its workers or leases are gone mid-run: the job failed (policy.on_failure decides the rest)


@dataclasses.dataclass(frozen=True)
class AllocDecision:
    action: Action
    job_id: str
    joined: tuple[int, ...] = ()  # JOINED, STARTED: the ranks the node says joined
    outcome: policy.Outcome | None = None  # FAIL
    event: str = ""  # LEASE_AGAIN: the job's event


def reconcile(agent: AgentLive, allocations: Mapping[str, Sequence[Allocation]], attempts: Reads[str, int],
              exited: Reads[str, Collection[int]], ranks_on: Reads[str, Sequence[int]],
              came_back: bool) -> list[AllocDecision]:
    """Decisions for the agent's allocations. `allocations`: job -> all of its allocations, for each
    job holding the agent. Read with `.get` only, as needed: `attempts` (job -> its current run; missing:
    no such job), `exited` (job -> ranks of the current run that exited), `ranks_on` (job -> the ranks
    planned on this agent). `came_back`: the agent just registered (it restarted or re-attached)."""
    decisions = []
    for job_id, job_allocs in allocations.items():
        alloc = next((a for a in job_allocs if a.agent == agent.name), None)
        if alloc is None or alloc.state == AllocState.RELEASING:
            continue
        if job_id in agent.running:
            if not runs_current(agent, job_id, attempts.get(job_id)):
                continue  # an earlier run still being stopped there
            ranks = tuple(agent.running[job_id])
            action = Action.STARTED if alloc.state in _PORTS_HELD else Action.JOINED
            decisions.append(AllocDecision(action, job_id, joined=ranks))
        elif alloc.state in _PORTS_HELD and job_id not in agent.leased:
            if any(a.state == AllocState.STARTED for a in job_allocs):
                why = RESTARTED if came_back else "lost its leased ports"
                decisions.append(AllocDecision(Action.FAIL, job_id, outcome=policy.vanished(
                    agent.name, (ranks_on.get(job_id) or ()), why)))
            else:
                decisions.append(AllocDecision(Action.LEASE_AGAIN, job_id,
                                               event=f"node {agent.name} lost its leased ports; leasing again"))
        elif alloc.state == AllocState.STARTED:
            gone = set(exited.get(job_id) or ())
            missing = [r for r in (ranks_on.get(job_id) or ()) if r not in gone]
            if missing:
                why = RESTARTED if came_back else "no longer runs the job's workers and never reported their exits"
                decisions.append(AllocDecision(Action.FAIL, job_id, outcome=policy.vanished(agent.name, missing, why)))
    return decisions


def runs_current(agent: AgentLive, job_id: str, attempt: int | None) -> bool:
    """Whether what `agent` runs of the job is its current run (`attempt`; None: no such job)."""
    return attempt is not None and agent.attempts.get(job_id, 0) == attempt


def released(agent: AgentLive, allocations: Iterable[Allocation]) -> list[str]:
    """Jobs that ended (or restart) and that the agent no longer runs nor holds: their slots are free."""
    return [a.job_id for a in allocations if a.state == AllocState.RELEASING
            and a.job_id not in agent.running and a.job_id not in agent.leased]


def lost_agents(agents: Iterable[AgentLive], now: float, lost_after: float) -> list[tuple[str, float]]:
    """(agent, seconds it has been silent) for each live agent silent past `lost_after` (an engine's own node,
    not `watched`, never is: its engine answers for it)."""
    return [(a.name, now - a.last_heartbeat) for a in agents
            if a.watched and not a.lost and now - a.last_heartbeat > lost_after]


def still_silent(agents: Mapping[str, AgentLive], silent: Iterable[tuple[str, float]], now: float,
                 lost_after: float) -> list[tuple[str, float]]:
    """Of `silent` (lost_agents' answer, found by a scan of every agent made without the coordinator's lock,
    so that a submission never waits for it), those still live and silent now, under the lock: not heard
    from meanwhile, nor registered again."""
    return lost_agents([a for name, _ in silent if (a := agents.get(name)) is not None], now, lost_after)

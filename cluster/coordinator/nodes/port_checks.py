"""What a node's answer to a port check or a peer probe means for the job's start. Pure.

Before anything starts, each node checks that the ports leased to it are free (LEASING -> LEASED; a
one-node job needs no probe: -> REACHABLE), then, once every node holds its ports, probes its peers'
ports (LEASED -> REACHABLE). Busy ports are leased again elsewhere in the range; an unreachable peer
fails the job at once, naming both ends."""

from __future__ import annotations

import dataclasses
from typing import Collection, Iterable, Sequence

from cluster.coordinator import placement as placement_lib, policy
from cluster.shared.model import Allocation, AllocState, JobState
from cluster.shared.work import ProbeFailure


@dataclasses.dataclass(frozen=True)
class PortDecision:
    state: AllocState | None = None  # the ports are free: the allocation's next state
    ports: tuple[int, ...] = ()  # some were busy: lease these instead (and check them)
    outcome: policy.Outcome | None = None  # no free ports left: the job fails with this


def port_answer(mine: Allocation | None, job_allocs: Sequence[Allocation], busy: Collection[int],
                excluded: Collection[int], in_use: Iterable[int], port_range: tuple[int, int]) -> PortDecision | None:
    """None: a repeated or late answer (the allocation is not checking its ports). `excluded`: ports
    found busy on the node for this job so far, `busy` among them; `in_use`: the node's other jobs' ports."""
    if mine is None or mine.state != AllocState.LEASING:
        return None
    if not busy:
        return PortDecision(state=AllocState.LEASED if len(job_allocs) > 1 else AllocState.REACHABLE)
    try:
        return PortDecision(ports=tuple(placement_lib.choose_ports(len(mine.ports), port_range, in_use, excluded)))
    except placement_lib.PlacementError as e:
        return PortDecision(outcome=policy.Outcome(JobState.FAILED, f"cannot lease ports on {mine.agent}: {e}", 1))


def probe_answer(mine: Allocation | None, job_allocs: Sequence[Allocation],
                 failures: Sequence[ProbeFailure]) -> policy.Outcome | AllocState | None:
    """REACHABLE when every peer answered; the job's failure when one did not (about ports still
    leased: an answer about ports leased again since is stale); None: a repeated or late answer."""
    if mine is None or mine.state != AllocState.LEASED:
        return None
    current = {(a.agent, a.address, p) for a in job_allocs for p in a.ports}
    failures = [f for f in failures if (f.peer, f.address, f.port) in current]
    if failures:
        return policy.unreachable(mine.agent, failures)
    return AllocState.REACHABLE

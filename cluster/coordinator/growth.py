"""Nodes an engine's cluster may still add (an autoscaled pool: Engine contract's NodesExpected), as the job side
uses them: admission counts them (a job that fits only once they are there waits, it is not refused), and
after each scheduling round the engine is told how many of them the queued jobs lack, so that it can make
the demand seen (Kubernetes: a pending placeholder pod per missing node, which the cluster autoscaler answers).
Pure."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from cluster.coordinator.engine import NodesExpected
from cluster.coordinator.scheduler import PendingJob

LOOK = 64  # queued jobs, in scheduling order, whose lack is counted (a deep queue asks for no more than this)


def with_expected(sizes: Mapping[int, int], expected: Sequence[NodesExpected]) -> Counter[int]:
    """How many nodes there are of each size once the expected ones are added too."""
    total = Counter({size: count for size, count in sizes.items() if count > 0})
    for nodes in expected:
        if nodes.count > 0 and nodes.slots > 0:
            total[nodes.slots] += nodes.count
    return total


def missing_nodes(queued: Sequence[PendingJob], idle: Mapping[int, int],
                  expected: Sequence[NodesExpected]) -> dict[int, int]:
    """How many more of the expected nodes, per size, the first LOOK queued jobs lack, each taking the idle
    nodes of that size first (`idle`: size -> how many idle nodes there are now). A job fits nodes of one
    expected size: one node if it is no larger, else whole nodes whose slots sum to its (none if they cannot);
    a job pinned to named nodes lacks none. At most what may be added."""
    room = {n.slots: n.count for n in expected if n.count > 0 and n.slots > 0}
    spare, lack = Counter(idle), Counter()
    for job in queued[:LOOK]:
        if job.nodes:
            continue
        for size in sorted(room):
            need = 1 if job.slots <= size else job.slots // size if job.slots % size == 0 else 0
            if need:
                taken = min(spare[size], need)
                spare[size] -= taken
                lack[size] += need - taken
                break
    return {size: min(count, room[size]) for size, count in lack.items() if count > 0}

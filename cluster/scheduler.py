"""The gang scheduler: pure functions, no network, no clock.

Rules (Determined's, tightened):
- A job whose slots fit on one node may share a node with other jobs: it
  goes to the node that fits it most tightly (best fit).
- A larger job takes whole nodes only, and its slots must be an exact sum
  of whole nodes (a multiple of the node size in a uniform cluster).
- All or nothing: a job is placed whole or not at all.
- Queue policy: higher priority first, then submission order (FIFO). The
  first job that does not fit gets a reservation: the nodes it will use
  once they drain. Later jobs may backfill only onto other nodes, so small
  jobs never starve a large one.
- A job that no set of registered nodes could ever hold is refused at
  submit time with the nearest sizes that would fit (`check_feasible`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    slots: int
    free_slots: int

    @property
    def idle(self) -> bool:
        return self.free_slots == self.slots


@dataclasses.dataclass(frozen=True)
class PendingJob:
    id: str
    slots: int
    priority: int = 0
    seq: int = 0  # submission order


@dataclasses.dataclass(frozen=True)
class Assignment:
    job_id: str
    nodes: tuple[tuple[str, int], ...]  # (node name, slots used there), node_rank order


@dataclasses.dataclass(frozen=True)
class Decision:
    assignments: tuple[Assignment, ...]
    waiting: dict[str, str]  # job id -> why it is not placed


class InfeasibleJob(ValueError):
    """No set of registered nodes could ever hold the job."""


# ---------------------------------------------------------------- feasibility

def achievable_sizes(node_sizes: Iterable[int], limit: int = 4096) -> tuple[int, set[int]]:
    """(largest single node, sums of whole nodes larger than it, up to `limit`)."""
    sizes = list(node_sizes)
    if not sizes:
        return 0, set()
    largest = max(sizes)
    sums = {0}
    for s in sizes:
        sums |= {x + s for x in sums if x + s <= limit}
    return largest, {x for x in sums if x > largest}


def describe_sizes(largest: int, multi: set[int], show: int = 8) -> str:
    parts = [f"1-{largest}" if largest > 1 else "1"] + [str(s) for s in sorted(multi)[:show]]
    if len(multi) > show:
        parts.append("...")
    return ", ".join(parts)


def check_feasible(slots: int, nodes: Sequence[Node]) -> None:
    """Raises InfeasibleJob, naming the sizes that would fit, if no placement could ever exist."""
    if not nodes:
        raise InfeasibleJob("no agents are registered: start `tfdist agent` on the nodes first")
    largest, multi = achievable_sizes(n.slots for n in nodes)
    if slots <= largest or slots in multi:
        return
    fits = sorted({*range(1, largest + 1), *multi})
    below = max((s for s in fits if s < slots), default=None)
    above = min((s for s in fits if s > slots), default=None)
    nearest = " or ".join(str(s) for s in (below, above) if s is not None)
    shape = _cluster_shape(nodes)
    raise InfeasibleJob(
        f"slots_per_trial={slots} can never be scheduled on this cluster ({shape}): a job larger than one node "
        f"takes whole nodes, so its slots must be a sum of whole nodes. Sizes that fit: "
        f"{describe_sizes(largest, multi)}. Nearest: {nearest}.")


def _cluster_shape(nodes: Sequence[Node]) -> str:
    by_size: dict[int, int] = defaultdict(int)
    for n in nodes:
        by_size[n.slots] += 1
    return ", ".join(f"{c} node{'s' if c > 1 else ''} of {s} slot{'s' if s > 1 else ''}"
                     for s, c in sorted(by_size.items(), reverse=True))


# ---------------------------------------------------------------- placement

def _best_fit(slots: int, nodes: Iterable[Node]) -> Node | None:
    best = None
    for n in nodes:
        if n.free_slots >= slots and (best is None or (n.free_slots, n.name) < (best.free_slots, best.name)):
            best = n
    return best


def _exact_whole_nodes(slots: int, nodes: Iterable[Node]) -> list[Node] | None:
    """Whole nodes whose sizes sum to exactly `slots`, fewest (largest) nodes first."""
    by_size: dict[int, list[Node]] = defaultdict(list)
    for n in sorted(nodes, key=lambda n: n.name):
        by_size[n.slots].append(n)
    # Bounded knapsack over the distinct node sizes (few in practice): sum -> counts per size.
    reachable: dict[int, tuple[int, ...]] = {0: ()}
    sizes = sorted(by_size, reverse=True)
    for size in sizes:
        nxt: dict[int, tuple[int, ...]] = {}
        for total, counts in reachable.items():
            for k in range(0, min(len(by_size[size]), (slots - total) // size) + 1):
                t = total + k * size
                if t not in nxt:
                    nxt[t] = counts + (k,)
        reachable = nxt
    counts = reachable.get(slots)
    if counts is None:
        return None
    chosen: list[Node] = []
    for size, k in zip(sizes, counts):
        chosen.extend(by_size[size][:k])
    return chosen


def _place(job: PendingJob, nodes: Iterable[Node], largest: int) -> list[tuple[str, int]] | None:
    if job.slots <= largest:
        node = _best_fit(job.slots, nodes)
        return [(node.name, job.slots)] if node else None
    whole = _exact_whole_nodes(job.slots, (n for n in nodes if n.idle))
    return [(n.name, n.slots) for n in whole] if whole else None


def _reserve(job: PendingJob, nodes: list[Node], largest: int) -> list[str]:
    """The nodes a blocked job will use once they drain: the emptiest that can hold it."""
    if job.slots <= largest:
        big_enough = [n for n in nodes if n.slots >= job.slots]
        return [max(big_enough, key=lambda n: (n.free_slots, n.name)).name] if big_enough else []
    # As if every node were idle, preferring those closest to idle.
    drained = [Node(n.name, n.slots, n.slots) for n in sorted(nodes, key=lambda n: (n.slots - n.free_slots, n.name))]
    whole = _exact_whole_nodes(job.slots, drained)
    return [n.name for n in whole] if whole else []


def _why_waiting(job: PendingJob, nodes: list[Node], largest: int, reserved_for: dict[str, str]) -> str:
    held = sorted(n for n, j in reserved_for.items() if j != job.id)
    held_note = f"; held for earlier job {reserved_for[held[0]]}: {', '.join(held)}" if held else ""
    if job.slots <= largest:
        best = max(nodes, key=lambda n: n.free_slots, default=None)
        most = f"the most free on any node is {best.free_slots} ({best.name})" if best else "no node is alive"
        return f"waiting for {job.slots} free slots on one node; {most}{held_note}"
    idle = [n.name for n in nodes if n.idle and reserved_for.get(n.name, job.id) == job.id]
    return (f"waiting for whole idle nodes totalling {job.slots} slots; idle now: "
            f"{', '.join(idle) if idle else 'none'}{held_note}")


def schedule(nodes: Sequence[Node], pending: Sequence[PendingJob]) -> Decision:
    """Places what can be placed now. `nodes` are the alive nodes with their free slots."""
    free = {n.name: n for n in nodes}
    largest = max((n.slots for n in nodes), default=0)
    reserved_for: dict[str, str] = {}  # node -> job id holding it
    assignments: list[Assignment] = []
    waiting: dict[str, str] = {}
    for job in sorted(pending, key=lambda j: (-j.priority, j.seq)):
        usable = [n for n in free.values() if n.name not in reserved_for]
        placed = _place(job, usable, largest)
        if placed:
            assignments.append(Assignment(job.id, tuple(placed)))
            for name, used in placed:
                n = free[name]
                free[name] = dataclasses.replace(n, free_slots=n.free_slots - used)
            continue
        if not reserved_for:  # the first blocked job keeps its nodes from backfill
            for name in _reserve(job, list(free.values()), largest):
                reserved_for[name] = job.id
        waiting[job.id] = _why_waiting(job, list(free.values()), largest, reserved_for)
    return Decision(tuple(assignments), waiting)

"""Why a job waits, in one line a person can act on: pure functions over typed values, no clock.

A queued job's reason (`queued`) names what blocks it: the jobs holding the nodes it needs (id, name,
where), the nodes kept for an earlier job, the LOST nodes, and what would let it start. A placed job's
reason (`starting`) says which nodes have not started its workers or which ranks have not joined, and
for how long against the startup timeout. Lists are cut at `SHOW` entries ("and N more"), names at
`NAME_CHARS`: a reason stays one bounded line however big the cluster. Durations are coarse (`ago`) so
a reason changes, and followers print it again, every 10 s at most (after its first 10 s), then every
minute.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

from cluster.coordinator.sizes import fits
from cluster.shared.model import Allocation, AllocState

SHOW = 3  # jobs, nodes or ranks named in one list before "and N more"
NAME_CHARS = 40  # a job's or node's name is cut after this many characters
QUIET = 10.0  # seconds of a start-up before its reason is given (ranks take seconds to import TensorFlow)


@dataclasses.dataclass(frozen=True)
class Holder:
    """A job holding (part of) a node."""
    job_id: str
    releasing: bool = False  # it ended or restarts: the node is stopping its workers


@dataclasses.dataclass(frozen=True)
class LostNode:
    name: str
    slots: int
    silent: float  # seconds since its last heartbeat


@dataclasses.dataclass(frozen=True)
class Surroundings:
    """What a queued job's reason needs beyond the scheduler's free slots. `holders`: node -> the jobs
    holding it; `names`: job id -> its name, read with `.get` for the few jobs named (a Lookup)."""
    holders: Mapping[str, Sequence[Holder]] = dataclasses.field(default_factory=dict)
    lost: Sequence[LostNode] = ()
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class FreeNode:
    """A live node as the scheduler left it: its size and free slots after this round's placements."""
    name: str
    slots: int
    free: int
    kept_for: str = ""  # the earlier blocked job this node is kept for ("" if none)


# ---------------------------------------------------------------- words
def ago(seconds: float) -> str:
    """A coarse duration: "7 s" (the first ten seconds), "40 s" (then tens of seconds), "3 min", "2 h"."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{int(seconds)} s"
    if seconds < 60:
        return f"{int(seconds // 10) * 10} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"


def listed(names: Sequence[str], show: int = SHOW) -> str:
    """"a1", "a1 and a2", "a1, a2, a3 and 4 more"."""
    names = [cut(n) for n in names]
    if len(names) <= show:
        return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]
    return ", ".join(names[:show]) + f" and {len(names) - show} more"


def cut(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 3] + "..."


def _job(job_id: str, names: Mapping[str, str]) -> str:
    name = names.get(job_id)
    return f"job {job_id} ({cut(name)})" if name else f"job {job_id}"


def _slots(n: int) -> str:
    return f"{n} slot{'' if n == 1 else 's'}"


# ---------------------------------------------------------------- a queued job
def queued(job_id: str, slots: int, nodes: Sequence[FreeNode], around: Surroundings) -> str:
    """Why the queued job `job_id` needing `slots` is not placed, and what would let it start."""
    largest = max((n.slots for n in nodes), default=0)
    whole = slots > largest
    lost = [n for n in around.lost if whole or n.slots >= slots]
    lost_clause = _lost(lost)
    if not fits(slots, [n.slots for n in nodes] + [n.slots for n in around.lost]):
        total = sum(n.slots for n in nodes) + sum(n.slots for n in around.lost)
        why = f"the cluster has {total} in all" if total < slots else \
            "no set of whole nodes sums to it (a job larger than one node takes whole nodes)"
        return "; ".join(filter(None, [f"needs {_slots(slots)} but {why}", lost_clause])) + \
            ": lower --slots or add nodes"
    usable = [n for n in nodes if n.kept_for in ("", job_id)]
    if whole:
        idle = sorted(n.name for n in usable if n.free == n.slots)
        head = f"waiting for whole idle nodes totalling {slots} slots; idle now: {listed(idle) if idle else 'none'}"
        mine = [n for n in usable if n.kept_for == job_id]
        needed = mine or usable
        needed = [n for n in needed if n.free < n.slots]
    else:
        candidates = [n for n in usable if n.slots >= slots]
        best = min(candidates, key=lambda n: (-n.free, n.name), default=None)
        head = f"waiting for {_slots(slots)} free on one node" + \
            (f"; the most free is {best.free} on {cut(best.name)}" if best else "")
        needed = candidates
    needed = sorted(needed, key=lambda n: (-n.free, n.name))
    holders = _holders(needed, around)
    kept = _kept(nodes, job_id, slots, whole, around.names)
    one = len({n.name for n in needed if around.holders.get(n.name)}) == 1
    if not fits(slots, [n.slots for n in nodes]):
        closing = f"it starts when {listed(sorted(n.name for n in lost))} {'is' if len(lost) == 1 else 'are'} back " \
                  "(or lower --slots)"
    elif holders:
        closing = ("it starts when that node is free" if one else "it starts when those nodes are free") if whole \
            else (f"it starts when that node has {slots} free" if one else
                  f"it starts when one of those nodes has {slots} free")
    elif kept:
        closing = "it starts after that job"
    else:
        closing = ""
    return "; ".join(filter(None, [head, holders, kept, lost_clause, closing]))


def _holders(needed: Sequence[FreeNode], around: Surroundings) -> str:
    """"job 3-ab12 (train) holds a1, a2; job 4-cd34 is stopping on a3; 2 more jobs hold others"."""
    on: dict[str, list[str]] = {}
    releasing: dict[str, bool] = {}
    for node in needed:
        for h in around.holders.get(node.name, ()):
            on.setdefault(h.job_id, []).append(node.name)
            releasing[h.job_id] = releasing.get(h.job_id, True) and h.releasing
    if not on:
        return ""
    parts = [f"{_job(job_id, around.names)} " + (f"is stopping its workers on {listed(nodes)}" if releasing[job_id]
                                                 else f"holds {listed(nodes)}")
             for job_id, nodes in list(on.items())[:SHOW]]
    if len(on) > SHOW:
        parts.append(f"{len(on) - SHOW} more jobs hold others")
    return "; ".join(parts)


def _kept(nodes: Sequence[FreeNode], job_id: str, slots: int, whole: bool, names: Mapping[str, str]) -> str:
    """The nodes this job could use that are kept for an earlier job (the first blocked one)."""
    kept = [n for n in nodes if n.kept_for not in ("", job_id) and (whole or n.slots >= slots)]
    if not kept:
        return ""
    return f"{listed(sorted(n.name for n in kept))} {'is' if len(kept) == 1 else 'are'} kept for earlier " \
           f"{_job(kept[0].kept_for, names)}"


def _lost(lost: Sequence[LostNode]) -> str:
    if not lost:
        return ""
    lost = sorted(lost, key=lambda n: n.name)
    silent = min(n.silent for n in lost)
    return f"{listed([n.name for n in lost])} {'is' if len(lost) == 1 else 'are'} LOST (no heartbeat for " \
           f"{ago(silent)}{' or more' if len(lost) > 1 else ''})"


# ---------------------------------------------------------------- a placed job
def starting(size: int, allocations: Sequence[Allocation], node_of_rank: Mapping[int, str], joined: Iterable[int],
             waited: float, timeout: float) -> str:
    """Why a placed job's start-up is not over: the nodes that have not started its workers (and what they
    are at), else the ranks that have not joined (called tfdist.init() or listened on their port), with
    how long it has waited against the startup timeout. "" when nothing is awaited, and in the first
    seconds of a start (`QUIET`, or half a shorter timeout), when every job waits for its ranks to import."""
    if waited < min(QUIET, timeout / 2):
        return ""
    for_how_long = (f" for {ago(waited)}" if waited >= 10 else "") + f" (startup timeout {timeout:g} s)"
    not_started = [a for a in allocations if a.state != AllocState.STARTED]
    if not_started:
        doing = {AllocState.LEASING: "leasing its ports", AllocState.LEASED: "checking that its peers reach it",
                 AllocState.REACHABLE: "starting its workers", AllocState.RELEASING: "letting an earlier run go"}
        first = not_started[0]
        more = f" (and {len(not_started) - 1} more node{'s' if len(not_started) > 2 else ''})" \
            if len(not_started) > 1 else ""
        return f"waiting for node {cut(first.agent)}{more}: {doing[first.state]}{for_how_long}"
    if size <= 1:
        return ""
    joined = set(joined)
    missing = [r for r in range(size) if r not in joined]
    if not missing:
        return ""
    ranks = [f"{r} (node {cut(node_of_rank.get(r, '?'))})" for r in missing]
    return f"{size - len(missing)} of {size} ranks joined; waiting for rank{'s' if len(missing) > 1 else ''} " \
           f"{listed(ranks)}{for_how_long}"

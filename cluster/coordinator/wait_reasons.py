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
from typing import Iterable, Mapping, Protocol, Sequence

from cluster.coordinator.sizes import achievable_sizes
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
class ExpectedNodes:
    """Nodes the cluster may still add (an autoscaled pool): `count` more of `slots` each; `why`: who adds them."""
    slots: int
    count: int
    why: str


@dataclasses.dataclass(frozen=True)
class Surroundings:
    """What a queued job's reason needs beyond the scheduler's free slots. `holders`: node -> the jobs
    holding it; `names`: job id -> its name, read with `.get` for the few jobs named (a Lookup)."""
    holders: Mapping[str, Sequence[Holder]] = dataclasses.field(default_factory=dict)
    lost: Sequence[LostNode] = ()
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    expected: Sequence[ExpectedNodes] = ()


class FreeNode(Protocol):
    """A live node as the scheduler left it (scheduler.Node): its size and free slots after this round."""

    @property
    def name(self) -> str: ...

    @property
    def slots(self) -> int: ...

    @property
    def free_slots(self) -> int: ...


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
def queued(job_id: str, slots: int, nodes: Sequence[FreeNode], around: Surroundings,
           kept_for: Mapping[str, str] | None = None) -> str:
    """Why the queued job `job_id` needing `slots` is not placed, and what would let it start. `kept_for`:
    node -> the earlier blocked job it is kept for."""
    return QueueReasons(nodes, kept_for or {}, around, slots).of(job_id, slots)


@dataclasses.dataclass(frozen=True)
class _Shared:
    """The parts of a reason shared by the jobs that could use the same nodes."""
    idle: str  # whole-node jobs: the idle nodes they could take
    best: FreeNode | None  # smaller jobs: the node with the most free slots they could use
    holders: str
    one_held: bool  # the jobs named hold one node only
    kept: str
    lost: tuple[LostNode, ...]


class QueueReasons:
    """The reasons of one scheduling round's blocked jobs (`of`). What they share (the sizes that fit, the
    nodes in order of free slots, the clauses naming holders, kept and lost nodes) is computed once per
    set of usable nodes: a round with a thousand blocked jobs of twenty sizes costs twenty reasons.
    `most`: the largest job asked about."""

    def __init__(self, nodes: Sequence[FreeNode], kept_for: Mapping[str, str], around: Surroundings, most: int):
        self.around, self.kept_for, self.most = around, kept_for, most
        self.nodes = sorted(nodes, key=lambda n: (-n.free_slots, n.name))  # the most free first
        self.largest = max((n.slots for n in nodes), default=0)
        self.reserver = next(iter(kept_for.values()), "")
        self.expected = tuple(around.expected)
        everything = [n.slots for n in nodes] + [n.slots for n in around.lost] + \
            [e.slots for e in self.expected for _ in range(min(e.count, most))]
        self.total = sum(everything)
        self.sizes = sorted(set(everything))
        self.alive = achievable_sizes([n.slots for n in nodes], limit=most)
        self.ever = achievable_sizes(everything, limit=most)
        self.lost = tuple(sorted(around.lost, key=lambda n: n.name))
        self._shared: dict[tuple, _Shared] = {}
        self._said: dict[tuple[int, bool], str] = {}
        self._by_name: dict[str, FreeNode] | None = None

    def of(self, job_id: str, slots: int, pinned_to: Sequence[str] = ()) -> str:
        """The reason of the blocked job `job_id` needing `slots` (jobs of one size share it); `pinned_to`: the
        only nodes it may run on."""
        if pinned_to:
            if self._by_name is None:
                self._by_name = {n.name: n for n in self.nodes}
            return pinned(job_id, slots, pinned_to, self._by_name, self.around, self.kept_for)
        said = (slots, job_id == self.reserver)
        if said not in self._said:
            self._said[said] = self._reason(job_id, slots)
        return self._said[said]

    def _reason(self, job_id: str, slots: int) -> str:
        whole = slots > self.largest
        if not _fits(self.ever, slots):
            why = f"the cluster has {self.total} in all" if self.total < slots else \
                "no set of whole nodes sums to it (a job larger than one node takes whole nodes)"
            lost = self.lost if whole else tuple(n for n in self.lost if n.slots >= slots)
            return "; ".join(filter(None, [f"needs {_slots(slots)} but {why}", _lost(lost)])) + \
                ": lower --slots or add nodes"
        # Smaller jobs can use the nodes of at least their size: the smallest such size keys what they share.
        fitting = 0 if whole else next((size for size in self.sizes if size >= slots), slots)
        key = (job_id == self.reserver, whole, fitting)
        if key not in self._shared:
            self._shared[key] = self._share(job_id, whole, fitting)
        shared = self._shared[key]
        if whole:
            head = f"waiting for whole idle nodes totalling {slots} slots; idle now: {shared.idle}"
        else:
            head = f"waiting for {_slots(slots)} free on one node" + \
                (f"; the most free is {shared.best.free_slots} on {cut(shared.best.name)}" if shared.best else "")
        growing = [e for e in self.expected if e.slots >= slots or slots % e.slots == 0]
        if growing:
            grow = growing[0]
            head += f"; {grow.why} may add up to {grow.count} node{'s' if grow.count > 1 else ''} of " \
                    f"{_slots(grow.slots)}"
        if growing and not _fits(self.alive, slots):
            closing = "it starts once they are added and Ready"
        elif not _fits(self.alive, slots):
            names = listed([n.name for n in shared.lost])
            closing = f"it starts when {names} {'is' if len(shared.lost) == 1 else 'are'} back (or lower --slots)"
        elif shared.holders:
            closing = ("it starts when that node is free" if shared.one_held else "it starts when those nodes are "
                       "free") if whole else (f"it starts when that node has {slots} free" if shared.one_held else
                                              f"it starts when one of those nodes has {slots} free")
        else:
            closing = "it starts after that job" if shared.kept else ""
        return "; ".join(filter(None, [head, shared.holders, shared.kept, _lost(shared.lost), closing]))

    def _share(self, job_id: str, whole: bool, fitting: int) -> _Shared:
        kept_for = self.kept_for
        usable = [n for n in self.nodes if kept_for.get(n.name, job_id) == job_id and n.slots >= fitting]
        mine = [n for n in usable if n.name in kept_for]
        idle = sorted(n.name for n in usable if n.free_slots == n.slots) if whole else []
        needed = [n for n in (mine or usable) if n.free_slots < n.slots] if whole else usable
        holders, one = _holders(needed, self.around)
        kept = [n for n in self.nodes if kept_for.get(n.name, job_id) != job_id and n.slots >= fitting]
        kept_clause = f"{listed(sorted(n.name for n in kept))} {'is' if len(kept) == 1 else 'are'} kept for " \
                      f"earlier {_job(kept_for[kept[0].name], self.around.names)}" if kept else ""
        return _Shared(listed(idle) if idle else "none", usable[0] if usable and not whole else None, holders, one,
                       kept_clause, tuple(n for n in self.lost if n.slots >= fitting))


PINNED_WHY = "a diagnose variant runs where its baseline ran"


def pinned(job_id: str, slots: int, pinned_to: Sequence[str], nodes: Mapping[str, FreeNode], around: Surroundings,
           kept_for: Mapping[str, str]) -> str:
    """Why a job that may run only on the nodes `pinned_to` waits: the nodes it waits for, who holds them,
    which are kept for an earlier job, LOST or not registered. `nodes`: the live nodes by name, as the
    scheduler left them."""
    here = [nodes[name] for name in pinned_to if name in nodes]
    one = bool(here) and slots <= max(n.slots for n in here)
    named = listed(list(pinned_to))
    if one:
        fitting = [n for n in here if n.slots >= slots]
        where = f"its node {named}" if len(pinned_to) == 1 else f"one of its nodes {named}"
        head = f"waiting for {_slots(slots)} free on {where}"
        busy = [n for n in fitting if n.free_slots < slots]
    else:
        fitting = here
        head = f"waiting for its node{'' if len(pinned_to) == 1 else 's'} {named}" + (" to be idle" if here else "")
        busy = [n for n in here if n.free_slots < n.slots]
    lost = {n.name: n for n in around.lost}
    missing = [name for name in pinned_to if name not in nodes]
    kept = [n.name for n in fitting if kept_for.get(n.name, job_id) != job_id]
    clauses = [f"{head} ({PINNED_WHY})", _busy(busy, around)]
    if kept:
        clauses.append(f"{listed(kept)} {'is' if len(kept) == 1 else 'are'} kept for earlier "
                       f"{_job(kept_for[kept[0]], around.names)}")
    clauses.append(_lost([lost[name] for name in missing if name in lost]))
    absent = [name for name in missing if name not in lost]
    if absent:
        clauses.append(f"{listed(absent)} {'is' if len(absent) == 1 else 'are'} not registered (an agent may be "
                       f"restarting: it starts once {'it is' if len(absent) == 1 else 'they are'} back)")
    if not one and not missing and sum(n.slots for n in here) != slots:
        clauses.append(f"they have {_slots(sum(n.slots for n in here))} in all, not {slots}: they changed since "
                       "its baseline ran")
    return "; ".join(filter(None, clauses))


def _busy(busy: Sequence[FreeNode], around: Surroundings) -> str:
    """"busy: a2 (job 7-ab12), a3 (job 8-cd34 stopping its workers)"."""
    if not busy:
        return ""
    def holders(node: FreeNode) -> str:
        jobs = [_job(h.job_id, around.names) + (" stopping its workers" if h.releasing else "")
                for h in around.holders.get(node.name, ())[:SHOW]]
        return f"{cut(node.name)} ({', '.join(jobs) if jobs else 'other workloads'})"
    more = f" and {len(busy) - SHOW} more" if len(busy) > SHOW else ""
    return "busy: " + ", ".join(holders(n) for n in busy[:SHOW]) + more


def _fits(sizes: tuple[int, set[int]], slots: int) -> bool:
    """`sizes`: achievable_sizes' (largest node, sums of whole nodes)."""
    largest, multi = sizes
    return slots <= largest or slots in multi


def _holders(needed: Sequence[FreeNode], around: Surroundings) -> tuple[str, bool]:
    """("job 3-ab12 (train) holds a1 and a2; job 4-cd34 is stopping its workers on a3; 2 more jobs hold
    others", whether they hold one node only)."""
    on: dict[str, list[str]] = {}
    releasing: dict[str, bool] = {}
    held = 0
    for node in needed:
        jobs = around.holders.get(node.name, ())
        held += bool(jobs)
        for h in jobs:
            on.setdefault(h.job_id, []).append(node.name)
            releasing[h.job_id] = releasing.get(h.job_id, True) and h.releasing
    if not on:
        return "", False
    parts = [f"{_job(job_id, around.names)} " + (f"is stopping its workers on {listed(nodes)}" if releasing[job_id]
                                                 else f"holds {listed(nodes)}")
             for job_id, nodes in list(on.items())[:SHOW]]
    if len(on) > SHOW:
        parts.append(f"{len(on) - SHOW} more jobs hold others")
    return "; ".join(parts), held == 1


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

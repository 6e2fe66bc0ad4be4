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
- A job pinned to named nodes (a diagnose variant: where its baseline ran)
  goes only there: onto the tightest of them if it fits one, else onto
  exactly all of them once each is idle and their slots sum to the job's.
  If it is the first blocked, the nodes it keeps are its own.
- A job that no set of registered nodes could ever hold is refused at
  submit time with the nearest sizes that would fit (`check_feasible`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Iterable, Sequence

from cluster.coordinator import wait_reasons
from cluster.coordinator.capacity import Capacity, Node, NodeIndex  # noqa: F401 (Node: its home was here)
from cluster.coordinator.sizes import achievable_from_counts, achievable_sizes  # noqa: F401 (its home was here)
from tfdist.errors import UserError


@dataclasses.dataclass(frozen=True)
class PendingJob:
    id: str
    slots: int
    priority: int = 0
    seq: int = 0  # submission order
    nodes: tuple[str, ...] = ()  # the only nodes it may run on (config.diagnose.nodes); (): any


@dataclasses.dataclass(frozen=True)
class Assignment:
    job_id: str
    nodes: tuple[tuple[str, int], ...]  # (node name, slots used there), node_rank order


@dataclasses.dataclass(frozen=True)
class Decision:
    assignments: tuple[Assignment, ...]
    waiting: Mapping[str, str]  # job id -> why it is not placed (BlockedReasons: computed when asked)
    settled: bool = False  # no free slot is left outside the reserved nodes: nothing more could be placed
    reserver_priority: int | None = None  # the priority of the job the reserved nodes are kept for


class InfeasibleJob(UserError):
    """No set of registered nodes could ever hold the job (refused at submit: INVALID_ARGUMENT, exit 2)."""


# ---------------------------------------------------------------- feasibility

def describe_sizes(largest: int, multi: set[int], show: int = 8) -> str:
    parts = [f"1-{largest}" if largest > 1 else "1"] + [str(s) for s in sorted(multi)[:show]]
    if len(multi) > show:
        parts.append("...")
    return ", ".join(parts)


def check_feasible(slots: int, nodes: Sequence[Node]) -> None:
    """check_feasible_sizes for a list of nodes."""
    check_feasible_sizes(slots, size_counts(nodes))


def size_counts(nodes: Sequence[Node]) -> Counter[int]:
    """How many of the nodes there are of each size (slots)."""
    return Counter(n.slots for n in nodes)


def check_feasible_sizes(slots: int, sizes: Mapping[int, int]) -> None:
    """Raises InfeasibleJob, naming the sizes that would fit, if no placement could ever exist on live nodes
    of these `sizes` (size -> how many nodes, busy or not). Its work is bounded by the distinct sizes and
    their sum, whatever `slots` is and however many nodes there are."""
    sizes = {s: c for s, c in sizes.items() if c > 0}
    if not sizes:
        raise InfeasibleJob("no agents are registered: start `tfdist agent` on the nodes first")
    largest = max(sizes)
    if slots <= largest:
        return
    # The smallest fitting size above `slots`, if any, is at most one node further.
    largest, multi = achievable_from_counts(sizes, limit=slots + largest)
    if slots in multi:
        return
    below = max((s for s in multi if s < slots), default=largest)
    above = min((s for s in multi if s > slots), default=None)
    nearest = " or ".join(str(s) for s in (below, above) if s is not None)
    shape = ", ".join(f"{c} node{'s' if c > 1 else ''} of {s} slot{'s' if s > 1 else ''}"
                      for s, c in sorted(sizes.items(), reverse=True))
    raise InfeasibleJob(
        f"slots_per_trial={slots} can never be scheduled on this cluster ({shape}): a job larger than one node "
        f"takes whole nodes, so its slots must be a sum of whole nodes. Sizes that fit: "
        f"{describe_sizes(largest, multi)}. Nearest: {nearest}.")


class BlockedReasons(Mapping):
    """Why each job a round did not place waits (job id -> one line), computed when first asked: a deep
    queue's reasons are never all wanted at once (`tfdist jobs` shows a page, `tfdist job` one), so a round
    costs what it placed, not the queue. `around` may be a function giving the Surroundings then (with
    this round's placements applied); `current` says whether a job still waits (one placed or canceled
    since the round has no reason)."""

    def __init__(self, blocked: Sequence[PendingJob], cap: Capacity, placed: Sequence[Assignment],
                 around: wait_reasons.Surroundings | Callable[[], wait_reasons.Surroundings],
                 current: Callable[[str], bool] | None = None):
        self._blocked, self._cap, self._placed, self._around = list(blocked), cap, placed, around
        self._current = current
        self._by_id: dict[str, PendingJob] | None = None
        self._reasons: wait_reasons.QueueReasons | None = None
        self._lock = threading.Lock()  # listings read reasons without the coordinator's lock, while jobs are added

    def add(self, job: PendingJob) -> None:
        """A job queued after the round that could not have been placed in it either."""
        with self._lock:
            self._blocked.append(job)
            if self._by_id is not None:
                self._by_id[job.id] = job
            if self._reasons is not None and job.slots > self._reasons.most:
                self._reasons = None  # its sizes were worked out up to a smaller job

    def _job(self, job_id: str) -> PendingJob | None:
        with self._lock:
            if self._by_id is None:
                self._by_id = {j.id: j for j in self._blocked}
            job = self._by_id.get(job_id)
        return job if job is not None and (self._current is None or self._current(job_id)) else None

    def __getitem__(self, job_id: str) -> str:
        job = self._job(job_id)
        if job is None:
            raise KeyError(job_id)
        with self._lock:
            if self._reasons is None:
                self._reasons = self._build()
            reasons = self._reasons
        return reasons.of(job.id, job.slots, job.nodes)

    def __iter__(self) -> Iterator[str]:
        return (j.id for j in list(self._blocked) if self._current is None or self._current(j.id))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _build(self) -> wait_reasons.QueueReasons:
        if callable(self._around):  # asked now: it already shows this round's placements holding their nodes
            around = self._around()
        else:
            holders = dict(self._around.holders)
            for assignment in self._placed:  # placed in this round: they hold their nodes now
                for name, _ in assignment.nodes:
                    holders[name] = (*holders.get(name, ()), wait_reasons.Holder(assignment.job_id))
            around = dataclasses.replace(self._around, holders=holders)
        return wait_reasons.QueueReasons(self._cap.nodes_now(), self._cap.reserved_for, around,
                                         max((job.slots for job in self._blocked), default=0))


def schedule(nodes: Sequence[Node] | NodeIndex, pending: Sequence[PendingJob],
             around: wait_reasons.Surroundings | Callable[[], wait_reasons.Surroundings] = wait_reasons.Surroundings(),
             *, ordered: bool = False, skip: Iterable[str] = (), current: Callable[[str], bool] | None = None
             ) -> Decision:
    """Places what can be placed now. `nodes` are the alive nodes with their free slots (or the coordinator's
    NodeIndex of them, which the round does not change); `around` is what
    the waiting reasons name besides them (who holds each node, the lost nodes), or a function giving it
    when a reason is first asked. `ordered`: `pending` is already in queue order (priority, then
    submission); jobs in `skip` are not placed (they still hold nodes from their last run). The round stops
    at the first job once no free slot is left outside the reserved nodes: the rest wait."""
    if isinstance(nodes, NodeIndex):
        cap, uniform = nodes.capacity(), len(nodes.sizes) <= 1
    else:
        cap, uniform = Capacity(nodes), len({n.slots for n in nodes}) <= 1
    skip = set(skip)
    assignments: list[Assignment] = []
    blocked: list[PendingJob] = []
    smallest_blocked_whole = None  # a whole-node job that did not fit: larger ones will not either...
    queue = pending if ordered else sorted(pending, key=lambda j: (-j.priority, j.seq))
    reserver_priority = None
    for i, job in enumerate(queue):
        if job.id in skip:
            continue
        if cap.free_total <= 0:  # nothing left to place anything on: the rest wait
            if not cap.reserved_for:  # the first of them keeps the nodes it will use once they drain
                cap.reserve(_kept(cap, job), job.id)
                reserver_priority = job.priority
            blocked.extend(j for j in queue[i:] if j.id not in skip)
            break
        placed = None
        if job.nodes:
            placed = cap.place_on(job.slots, job.nodes)
        elif not (smallest_blocked_whole and job.slots > cap.largest and job.slots >= smallest_blocked_whole
                  and uniform):  # ...in a uniform cluster, where fitting is monotone in size
            placed = cap.place(job.slots)
        if placed:
            assignments.append(Assignment(job.id, tuple(placed)))
            for name, used in placed:
                cap.take(name, used)
            continue
        if job.slots > cap.largest and not job.nodes:
            smallest_blocked_whole = min(smallest_blocked_whole or job.slots, job.slots)
        if not cap.reserved_for:  # the first blocked job keeps its nodes from backfill
            cap.reserve(_kept(cap, job), job.id)
            reserver_priority = job.priority
        blocked.append(job)
    return Decision(tuple(assignments), BlockedReasons(blocked, cap, assignments, around, current),
                    settled=cap.free_total <= 0, reserver_priority=reserver_priority)


def _kept(cap: Capacity, job: PendingJob) -> list[str]:
    """The nodes a blocked job keeps from backfill until they drain: a pinned job, some of its own."""
    return cap.reservation_on(job.slots, job.nodes) if job.nodes else cap.reservation(job.slots)

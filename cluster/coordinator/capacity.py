"""What a scheduling round places onto: the live nodes' free slots, indexed for the scheduler's questions.

`NodeIndex` is the coordinator's, kept up to date as allocations and nodes change (a node's entry moves
when a job takes or frees its slots, not the whole table). A round works on a `Capacity` over it that
shares its buckets and its table of nodes and copies only what the round changes: a round's cost follows
the job and the nodes it touches, not the cluster (rebuilding the index for each round cost 12 ms a
submission at 10,000 nodes; copying just its table of nodes, 0.35 ms). `Capacity(nodes)` builds one from a
list (the pure scheduler's tests and benchmark).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections import ChainMap, Counter, defaultdict
from typing import Iterable, Mapping, MutableMapping, Sequence


@dataclasses.dataclass(frozen=True)
class Node:
    """A live node as a scheduling round sees it: its size and free slots."""
    name: str
    slots: int
    free_slots: int

    @property
    def idle(self) -> bool:
        return self.free_slots == self.slots


class Capacity:
    """Free capacity indexed for the two questions the scheduler asks: the tightest node with
    `k` free slots (buckets by free slots), and idle nodes by size. Reserved nodes are left out."""

    def __init__(self, nodes: Sequence[Node] = ()):
        self._shared: set[tuple[str, int]] = set()  # buckets still shared with a NodeIndex (copied on write)
        self._live: NodeIndex | None = None  # the NodeIndex this round reads, if any...
        self._taken: dict[str, Node] = {}  # ...the nodes this round changed (the index's stay as they are)...
        self._read: dict[str, Node] = {}  # ...and each as the round read it from the index
        self.nodes: MutableMapping[str, Node] = {n.name: n for n in nodes}
        self.largest = max((n.slots for n in nodes), default=0)
        self.by_free: dict[int, list[str]] = defaultdict(list)
        self.idle_by_size: dict[int, list[str]] = defaultdict(list)
        for n in sorted(nodes, key=lambda n: n.name):  # in name order: each bucket is built sorted, by appends
            self.by_free[n.free_slots].append(n.name)
            if n.idle:
                self.idle_by_size[n.slots].append(n.name)
        self.reserved_for: dict[str, str] = {}
        self.free_total = sum(n.free_slots for n in nodes)  # free slots outside reserved nodes

    def _bucket(self, table: dict[int, list[str]], kind: str, key: int) -> list[str]:
        """table[key], this round's own copy if it was the index's."""
        if (kind, key) in self._shared:
            self._shared.discard((kind, key))
            table[key] = list(table[key])
        return table[key]

    def _index(self, n: Node) -> None:
        bisect.insort(self._bucket(self.by_free, "free", n.free_slots), n.name)
        if n.idle:
            bisect.insort(self._bucket(self.idle_by_size, "idle", n.slots), n.name)

    def _unindex(self, n: Node) -> None:
        bucket = self._bucket(self.by_free, "free", n.free_slots)
        del bucket[bisect.bisect_left(bucket, n.name)]
        if n.idle:
            idle = self._bucket(self.idle_by_size, "idle", n.slots)
            del idle[bisect.bisect_left(idle, n.name)]

    def take(self, name: str, used: int) -> None:
        n = self.nodes[name]
        if self._live is not None:
            self._read.setdefault(name, n)
        self._unindex(n)
        self.nodes[name] = n = dataclasses.replace(n, free_slots=n.free_slots - used)
        self._index(n)
        self.free_total -= used

    def reserve(self, names: list[str], job_id: str) -> None:
        for name in names:
            self._unindex(self.nodes[name])
            self.reserved_for[name] = job_id
            self.free_total -= self.nodes[name].free_slots

    def best_fit(self, slots: int) -> str | None:
        """The node with the fewest free slots that still holds `slots` (by name among equals): a walk over
        the distinct free counts (at most one per node), not over every number up to the largest node."""
        free = min((f for f, names in self.by_free.items() if f >= slots and names), default=None)
        return None if free is None else self.by_free[free][0]

    def whole_nodes(self, slots: int, idle_by_size: dict[int, list[str]] | None = None) -> list[str] | None:
        """Idle nodes whose sizes sum to exactly `slots`: a bounded knapsack over the distinct sizes."""
        idle_by_size = self.idle_by_size if idle_by_size is None else idle_by_size
        sizes = sorted((s for s, names in idle_by_size.items() if names), reverse=True)
        reachable: dict[int, tuple[int, ...]] = {0: ()}
        for size in sizes:
            nxt: dict[int, tuple[int, ...]] = {}
            for total, counts in reachable.items():
                for k in range(min(len(idle_by_size[size]), (slots - total) // size) + 1):
                    nxt.setdefault(total + k * size, counts + (k,))
            reachable = nxt
        counts = reachable.get(slots)
        if counts is None:
            return None
        return [name for size, k in zip(sizes, counts) for name in idle_by_size[size][:k]]

    def place(self, slots: int) -> list[tuple[str, int]] | None:
        """Where a job of `slots` goes now: (node, slots there) for each of its nodes; None if it does not fit."""
        if slots <= self.largest:
            name = self.best_fit(slots)
            return [(name, slots)] if name else None
        names = self.whole_nodes(slots)
        return [(name, self.nodes[name].slots) for name in names] if names else None

    def place_on(self, slots: int, names: Sequence[str]) -> list[tuple[str, int]] | None:
        """Where a job pinned to the nodes `names` goes now, none of them reserved for another job: one of
        them, the tightest that holds it, if it fits one of them; else all of them, in their order, if each is
        idle and their slots sum to the job's. None if it does not fit (or one of them is not registered)."""
        here = [self.nodes[name] for name in names if name in self.nodes]
        if here and slots <= max(n.slots for n in here):
            fits = [n for n in here if n.free_slots >= slots and n.name not in self.reserved_for]
            best = min(fits, key=lambda n: (n.free_slots, n.name), default=None)
            return [(best.name, slots)] if best else None
        if len(here) == len(names) and sum(n.slots for n in here) == slots and \
                all(n.idle and n.name not in self.reserved_for for n in here):
            return [(n.name, n.slots) for n in here]
        return None

    def reservation_on(self, slots: int, names: Sequence[str]) -> list[str]:
        """The nodes a blocked job pinned to `names` keeps until they drain: the emptiest of them that can hold
        it, or all of them (if all are registered and their slots sum to the job's); none that is kept already."""
        here = [self.nodes[name] for name in names if name in self.nodes]
        free = [n for n in here if n.name not in self.reserved_for]
        if here and slots <= max(n.slots for n in here):
            big_enough = [n for n in free if n.slots >= slots]
            return [max(big_enough, key=lambda n: (n.free_slots, n.name)).name] if big_enough else []
        whole = len(free) == len(names) and sum(n.slots for n in free) == slots
        return [n.name for n in free] if whole else []

    def nodes_now(self) -> list[Node]:
        """Every node with its free slots after this round (during the round too: its reservations), and for
        a waiting job's reason, asked after the round, perhaps without the coordinator's lock. Over a NodeIndex: its nodes now (anything freed or
        joined since the round started a newer one), with the slots this round took from those the index
        still holds as the round read them (once placed, the index has them itself)."""
        if self._live is None:
            return list(self.nodes.values())
        return [self._taken[n.name] if self._read.get(n.name) is n else n for n in self._live.snapshot()]

    def reservation(self, slots: int) -> list[str]:
        """The nodes a blocked job of `slots` will use once they drain: the emptiest that can hold it."""
        candidates = [n for n in self.nodes_now() if n.name not in self.reserved_for]  # not a walk of the ChainMap
        if slots <= self.largest:
            big_enough = [n for n in candidates if n.slots >= slots]
            return [max(big_enough, key=lambda n: (n.free_slots, n.name)).name] if big_enough else []
        by_size: dict[int, list[str]] = defaultdict(list)  # as if idle, the closest to idle first
        for n in sorted(candidates, key=lambda n: (n.slots - n.free_slots, n.name)):
            by_size[n.slots].append(n.name)
        return self.whole_nodes(slots, by_size) or []


class NodeIndex:
    """The live nodes by name with their free slots, bucketed by free slots and (idle ones) by size, each
    bucket sorted by name; `free_total` and the sizes kept as they change."""

    def __init__(self, nodes: Sequence[Node] = ()):
        self.nodes: dict[str, Node] = {}
        self._lock = threading.Lock()  # changed under the coordinator's lock; snapshots are taken without it
        self.by_free: dict[int, list[str]] = defaultdict(list)
        self.idle_by_size: dict[int, list[str]] = defaultdict(list)
        self.sizes: Counter[int] = Counter()
        self.free_total = 0
        for n in nodes:
            self.put(n)

    def put(self, node: Node) -> None:
        """Adds the node, or moves it to its new free count."""
        old = self.nodes.get(node.name)
        if old == node:
            return
        if old is not None:
            self._unindex(old)
        with self._lock:
            self.nodes[node.name] = node  # in place: a node that only changes keeps its slot in the table
        bisect.insort(self.by_free[node.free_slots], node.name)
        if node.idle:
            bisect.insort(self.idle_by_size[node.slots], node.name)
        self.sizes[node.slots] += 1
        self.free_total += node.free_slots

    def remove(self, name: str) -> None:
        with self._lock:
            node = self.nodes.pop(name, None)
        if node is not None:
            self._unindex(node)

    def _unindex(self, node: Node) -> None:
        name = node.name
        bucket = self.by_free[node.free_slots]
        del bucket[bisect.bisect_left(bucket, name)]
        if node.idle:
            idle = self.idle_by_size[node.slots]
            del idle[bisect.bisect_left(idle, name)]
        self.sizes[node.slots] -= 1
        if not self.sizes[node.slots]:
            del self.sizes[node.slots]
        self.free_total -= node.free_slots

    def capacity(self) -> Capacity:
        """A round's view: the index's buckets, shared until the round changes one (then copied)."""
        cap = Capacity()
        cap._live = self
        cap.nodes = ChainMap(cap._taken, self.nodes)  # the round writes to its own map, reads through
        cap.largest = max(self.sizes, default=0)
        cap.by_free = defaultdict(list, self.by_free)
        cap.idle_by_size = defaultdict(list, self.idle_by_size)
        cap._shared = {("free", k) for k in self.by_free} | {("idle", k) for k in self.idle_by_size}
        cap.free_total = self.free_total
        return cap

    def snapshot(self) -> list[Node]:
        """The nodes as they are now, safe to take while a round changes them."""
        with self._lock:
            return list(self.nodes.values())


class LiveNodes:
    """The coordinator's NodeIndex, refreshed from its agents (alive or lost, by name) and allocations
    for the nodes that changed: `refresh(names)`, or every node with None (at start, after a rollback)."""

    def __init__(self, agents: Mapping, allocs):
        self.agents, self.allocs = agents, allocs
        self.index = NodeIndex()
        self.refresh(None)
        allocs.listeners.append(self.refresh)

    def refresh(self, names: Iterable[str] | None) -> None:
        if names is None:
            self.index, names = NodeIndex(), list(self.agents)
        for name in names:
            agent = self.agents.get(name)
            if agent is None or agent.lost:
                self.index.remove(name)
            else:
                used = sum(a.slots for a in self.allocs.on_agent(name))  # more than it has: it re-registered smaller
                self.index.put(Node(name, agent.record.slots, max(0, agent.record.slots - used - agent.held_elsewhere)))

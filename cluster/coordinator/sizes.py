"""Which job sizes a set of nodes can hold: one node, or an exact sum of whole nodes (the scheduler's rule)."""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping


def achievable_sizes(node_sizes: Iterable[int], limit: int = 4096) -> tuple[int, set[int]]:
    """(largest single node, sums of whole nodes larger than it, up to `limit`): see achievable_from_counts."""
    return achievable_from_counts(Counter(node_sizes), limit)


def achievable_from_counts(counts: Mapping[int, int], limit: int = 4096) -> tuple[int, set[int]]:
    """(largest single node, sums of whole nodes larger than it, up to `limit`), from how many nodes there
    are of each size. A bitset subset-sum: bit k of `reach` is set when some set of nodes sums to k. Its work
    depends on the cluster's sizes alone, never on `limit` (a request's slots) nor on how many nodes there
    are: no set of nodes sums beyond all of them, and nodes of one size are added in doubling groups (a
    uniform cluster of n nodes costs log n shifts).
    """
    counts = {size: count for size, count in counts.items() if count > 0}
    if not counts:
        return 0, set()
    largest = max(counts)
    limit = min(limit, sum(size * count for size, count in counts.items()))
    mask = (1 << (limit + 1)) - 1
    reach = 1
    for size, count in counts.items():
        group = 1
        while count > 0:  # groups of 1, 2, 4... nodes, then the rest: every count 0..n stays reachable
            take = min(group, count)
            reach = (reach | (reach << (size * take))) & mask
            count -= take
            group *= 2
    bits = bin(reach)[:1:-1]  # bits[k] == "1": some set of nodes sums to k
    return largest, {k for k in range(largest + 1, len(bits)) if bits[k] == "1"}

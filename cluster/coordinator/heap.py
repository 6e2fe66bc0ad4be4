"""Short garbage collections in a coordinator that holds thousands of agents.

Python's full collection walks every tracked object: at 10,000 agents (~130,000 objects) it took 60-100 ms
on a loaded 2-core machine, and busy heartbeats trigger one every few seconds (an in-flight call's objects
count as promoted into the oldest generation). A submission that meets one waits for it. What survives a
full collection (agents, nodes, allocations, beacon peers: alive for minutes to days) is therefore moved
out of the collector's way at once (`gc.freeze`); the next full collections walk only what was made since
(~2 ms). Frozen objects are still freed by reference counting; only a reference cycle among them waits
until the heap is thawed, every THAW_EVERY seconds, and the next full collection walks everything once.
The daemon's entry point (`tfdist coordinator`) turns this on; the server's check loop thaws.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Callable

THAW_EVERY = 600.0

_installed = threading.Lock()


def _freeze_survivors(phase: str, info: dict) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def freeze_after_full_collections() -> None:
    """Process-wide and idempotent: after each full collection, its survivors are frozen. For the
    `tfdist coordinator` daemon's process (a coordinator embedded in another program leaves its heap be)."""
    with _installed:
        if _freeze_survivors not in gc.callbacks:
            gc.callbacks.append(_freeze_survivors)


def freezing() -> bool:
    """Whether freeze_after_full_collections is on in this process."""
    return _freeze_survivors in gc.callbacks


def stop_freezing() -> None:
    """Undoes freeze_after_full_collections, and thaws what it froze."""
    with _installed:
        if _freeze_survivors in gc.callbacks:
            gc.callbacks.remove(_freeze_survivors)
    gc.unfreeze()


class HeapThaw:
    """Thaws the frozen heap every `every` seconds so reference cycles among old objects are collected, while
    freeze_after_full_collections is on (a program that froze its own heap is left alone); `tick()` is called
    often (the coordinator's check loop). `unfreeze`, `on`: gc's and freezing (a test may fake them)."""

    def __init__(self, every: float = THAW_EVERY, clock: Callable[[], float] = time.monotonic,
                 unfreeze: Callable[[], None] = gc.unfreeze, on: Callable[[], bool] = freezing):
        self.every, self.clock, self._unfreeze, self._on = every, clock, unfreeze, on
        self._thawed_at = clock()

    def tick(self) -> bool:
        """Whether it thawed now."""
        now = self.clock()
        if now - self._thawed_at < self.every or not self._on():
            return False
        self._unfreeze()
        self._thawed_at = now
        return True

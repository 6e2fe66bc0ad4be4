"""The coordinator daemon's heap: survivors of a full collection are frozen, and thawed now and then."""

import gc

from cluster.coordinator.heap import HeapThaw, freeze_after_full_collections, stop_freezing


class _Cycle:
    def __init__(self):
        self.me = self


def test_survivors_of_a_full_collection_are_frozen_and_cycles_among_them_wait_for_the_thaw():
    gc.unfreeze()
    freeze_after_full_collections()
    freeze_after_full_collections()  # idempotent: one callback
    try:
        kept = [_Cycle() for _ in range(1000)]
        gc.collect()
        assert gc.get_freeze_count() >= 1000  # the next full collections walk only what is new
        del kept  # cyclic garbage among frozen objects: not collected while frozen ...
        gc.collect()
        assert sum(isinstance(o, _Cycle) for o in gc.get_objects()) == 0  # frozen: not even listed
        gc.unfreeze()  # ... until the thaw
        assert gc.collect() >= 1000
    finally:
        stop_freezing()
    assert _freeze_survivors_installed() == 0
    gc.collect()
    assert gc.get_freeze_count() == 0


def _freeze_survivors_installed():
    return sum(getattr(cb, "__name__", "") == "_freeze_survivors" for cb in gc.callbacks)


def test_the_heap_is_thawed_every_so_often():
    now, thawed = [0.0], []
    thaw = HeapThaw(every=600.0, clock=lambda: now[0], unfreeze=lambda: thawed.append(now[0]), on=lambda: True)
    now[0] = 599.0
    assert not thaw.tick()
    now[0] = 600.0
    assert thaw.tick() and thawed == [600.0]
    now[0] = 1000.0
    assert not thaw.tick()
    now[0] = 1200.0
    assert thaw.tick() and thawed == [600.0, 1200.0]


def test_a_heap_frozen_by_someone_else_is_left_alone():
    """An embedded coordinator (freezing not turned on) never thaws its host program's own gc.freeze()."""
    thawed = []
    thaw = HeapThaw(every=1.0, clock=lambda: 1000.0, unfreeze=lambda: thawed.append(1))
    assert not thaw.tick() and thawed == []

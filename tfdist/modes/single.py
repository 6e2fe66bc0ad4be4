"""The single-node modes: one process drives every slot of one node, through MirroredStrategy (`mirrored`),
CentralStorageStrategy (`central_storage`) or OneDeviceStrategy (`one_device`). They differ only in the
strategy built over the process's devices; the job is one process, so its chief does everything.
"""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.modes.base import Process, accumulate_in_optimizer


def _mirrored(tf: Any, devices: list[str]) -> object:
    return tf.distribute.MirroredStrategy(devices)


def _central_storage(tf: Any, devices: list[str]) -> object:
    return tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices, parameter_device="/cpu:0")


def _one_device(tf: Any, devices: list[str]) -> object:
    return tf.distribute.OneDeviceStrategy(devices[0])


class SingleNode:
    every_rank_runs_script = True
    every_rank_saves = True
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = ""

    def __init__(self, name: str, build: Callable[[Any, list[str]], object]):
        """`build(tf, devices)`: the mode's strategy over this process's devices."""
        self.name = name
        self._build = build

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        import tensorflow as tf

        from tfdist import strategy as tf_parts

        strategy = self._build(tf, tf_parts.local_devices(ctx.local_slots))
        return tf_parts.check_replicas(ctx, strategy)

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        accumulate_in_optimizer(optimizer, steps)


MIRRORED = SingleNode("mirrored", _mirrored)
CENTRAL_STORAGE = SingleNode("central_storage", _central_storage)
ONE_DEVICE = SingleNode("one_device", _one_device)

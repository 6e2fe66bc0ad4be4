"""`horovod`: one process per slot, Horovod over Gloo. Horovod needs no tf.distribute strategy: each process
is one replica and gradients are averaged by tfdist.horovod's tape or optimizer, so the mode's strategy is
TensorFlow's default one after `hvd.init()`. Each rank holds a full copy of the model: the chief alone saves.
"""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes.base import Process, accumulate_in_optimizer


class Horovod:
    name = "horovod"
    every_rank_runs_script = True
    every_rank_saves = False
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = ""

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        """The default strategy after `hvd.init()`, whose ranks must be tfdist's."""
        import tensorflow as tf

        from tfdist.compat.keras_horovod import import_horovod

        hvd = import_horovod()
        hvd.init()
        if hvd.size() != ctx.size or hvd.rank() != ctx.rank:
            raise LaunchEnvironmentError(f"Horovod says rank {hvd.rank()} of {hvd.size()} but tfdist launched rank "
                                         f"{ctx.rank} of {ctx.size}; check HOROVOD_* variables set outside tfdist")
        return tf.distribute.get_strategy()

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        """tfdist.horovod's all-reduce sits in the update, which then runs every `steps`-th step."""
        accumulate_in_optimizer(optimizer, steps)


HOROVOD = Horovod()

"""A mode name no worker mode has (TFDIST_DISTRIBUTION set by hand, or by a newer control plane): the script
still runs as a single process, as plain `python train.py` does; a job of several processes is refused by
tfdist.init(), naming the mode.
"""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes.base import Process, accumulate_in_optimizer


class Unsupported:
    every_rank_runs_script = True
    every_rank_saves = True
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = ""

    def __init__(self, name: str):
        self.name = name

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        if ctx.size > 1:
            raise LaunchEnvironmentError(f"distribution mode {self.name!r} is not supported by this tfdist")
        from tfdist import strategy as tf_parts  # imports TensorFlow

        return tf_parts.check_replicas(ctx, tf_parts.one_process_strategy(ctx))

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        accumulate_in_optimizer(optimizer, steps)

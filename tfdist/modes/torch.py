"""`torch`: PyTorch scripts written for torchrun, started with torchrun's environment
(cluster/shared/modes/torch.py). Joining is the script's own `torch.distributed.init_process_group()` (a
second one from tfdist would make the script's fail), so tfdist.init() creates nothing: the context carries
ranks, sizes, batch sizes, hyperparameters and tfdist's own collectives, and its strategy is None. The chief
alone writes checkpoints (DistributedDataParallel keeps every rank's copy alike)."""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import UserError
from tfdist.modes.base import Process


class Torch:
    name = "torch"
    every_rank_runs_script = True
    every_rank_saves = False
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = "the torch mode has no Keras optimizer: its all-reduce is DistributedDataParallel's"

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        return None

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        raise UserError("optimizations.aggregation_frequency acts on a Keras optimizer; the torch mode has none: "
                        "accumulate gradients with DistributedDataParallel's no_sync()")


TORCH = Torch()

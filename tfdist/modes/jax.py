"""`jax`: Keras 3 on the JAX backend, or plain JAX, across processes. Joining is
`keras.distribution.initialize()` where Keras runs on JAX (it also seeds every process's random generator
alike, so the model starts with the same weights everywhere), else `jax.distributed.initialize()`, both with
what the plan set (cluster/shared/modes/jax.py); a script that already joined is left as it is. The
strategy is a `keras.distribution.DataParallel` over every process's devices, set as Keras's distribution
(so `fit` splits each global batch over the processes; `with ctx.strategy.scope():` as in TensorFlow's modes
works too), or the distribution the script set before tfdist.init(); without Keras, a `jax.sharding.Mesh`
over every device with one axis, "batch". Every rank takes part in a save (sharded arrays are
every process's), the chief's copy is kept.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes.base import Process, accumulate_in_optimizer


def keras_on_jax() -> bool:
    """Keras is installed and set to run on JAX (the mode's default KERAS_BACKEND)."""
    return os.environ.get("KERAS_BACKEND", "") == "jax" and importlib.util.find_spec("keras") is not None


class Jax:
    name = "jax"
    every_rank_runs_script = True
    every_rank_saves = True
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = ("a data-parallel JAX step all-reduces inside the gradient computation: aggregating gradients in the "
                        "optimizer does not remove it")

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        import jax

        from tfdist.compat import jax_cluster

        jax_cluster.register()
        if ctx.size > 1 and not jax.distributed.is_initialized():
            if keras_on_jax():
                import keras

                keras.distribution.initialize()
            else:
                jax.distributed.initialize()
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        import jax

        if jax.process_count() != ctx.size or jax.process_index() != ctx.rank:
            raise LaunchEnvironmentError(f"JAX says process {jax.process_index()} of {jax.process_count()} but "
                                         f"tfdist launched rank {ctx.rank} of {ctx.size}; check JAX_* and "
                                         "KERAS_DISTRIBUTION_* variables set outside tfdist")
        if keras_on_jax():
            import keras

            if keras.distribution.distribution() is not None:
                return keras.distribution.distribution()  # the script's own, set before tfdist.init()
            data_parallel = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
            keras.distribution.set_distribution(data_parallel)  # `fit` splits each global batch over the processes
            return data_parallel
        import numpy as np

        return jax.sharding.Mesh(np.array(jax.devices()), ("batch",))

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        accumulate_in_optimizer(optimizer, steps)


JAX = Jax()

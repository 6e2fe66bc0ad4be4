"""`ps`: TensorFlow's ParameterServerStrategy. Only the chief runs the script past tfdist.init(): worker and ps
tasks serve it there until it is done, and the evaluator reads checkpoints. So the chief alone saves, its
ranks cannot meet in collectives, and nothing is averaged over them. tf_keras (TF_USE_LEGACY_KERAS=1, set by
the launch plan) runs the model; it runs no batch-level callbacks under this strategy.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes.base import Process, accumulate_in_optimizer

log = logging.getLogger("tfdist")

SERVING_ROLES = ("worker", "ps")  # tasks that serve the chief inside init() and never return from it
COLLECTIVES_REFUSAL = ("in ps mode only the chief runs your script (worker and ps tasks serve the chief inside "
                       "tfdist.init())")


class ParameterServers:
    name = "ps"
    every_rank_runs_script = False
    every_rank_saves = False
    batch_callbacks = False
    starts_own_workers = False
    no_communication_cut = ("parameter servers are read and written every step: aggregating gradients does not remove that "
                        "traffic")

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name, refusal=COLLECTIVES_REFUSAL)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        if ctx.role in SERVING_ROLES:
            serve_forever(ctx, signal_ready)  # never returns: the chief drives this task
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        """The chief's ParameterServerStrategy (it connects to every worker and ps task); the evaluator
        trains nothing and gets the default strategy."""
        import tensorflow as tf

        from tfdist.compat import keras_ps

        if ctx.role == "evaluator":
            return tf.distribute.get_strategy()
        if ctx.role != "chief":
            raise LaunchEnvironmentError(f"rank {ctx.rank}: ps mode has no role {ctx.role!r}")
        if "keras" in sys.modules:  # imported before init(): refuse its variables now (else when it loads)
            keras_ps.apply()
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        accumulate_in_optimizer(optimizer, steps)


def serve_forever(ctx: Process, on_ready: Callable[[], None]) -> None:
    """A worker or ps task: runs its TF server for the chief until stopped (SIGTERM)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    # TensorFlow's servers never return from join(); the chief's end is what stops this task.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    on_ready()
    log.info("rank %d serves as %s %d for the chief; it runs until the chief is done", ctx.rank, resolver.task_type,
             resolver.task_id)
    while server is not None:  # the reference keeps the server up
        time.sleep(3600)


PS = ParameterServers()

"""`mwms`: TensorFlow's MultiWorkerMirroredStrategy, one process per node (or per slot on CPU nodes). Every
rank runs the script and takes part in each save (MWMS's save is a collective); at exit the workers wait for
each other, so the chief's coordination service outlives the rest. Also the mode of plain `python train.py`.
"""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.modes.base import Process


class MultiWorkerMirrored:
    name = "mwms"
    every_rank_runs_script = True
    every_rank_saves = True
    batch_callbacks = True
    starts_own_workers = False
    no_communication_cut = ""

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        strategy = self.make_strategy(ctx)
        if ctx.size > 1:
            from tfdist import strategy as tf_parts

            tf_parts.register_exit_barrier(ctx.is_chief)
        return strategy

    def make_strategy(self, ctx: Process) -> object:
        from tfdist import strategy as tf_parts  # imports TensorFlow

        if ctx.size == 1:
            return tf_parts.check_replicas(ctx, tf_parts.one_process_strategy(ctx))
        import tensorflow as tf

        from tfdist.compat import keras_mwms, tf_keras_logs

        keras_mwms.apply()
        tf_keras_logs.apply()  # tf_keras's bar: the mean over workers, not their sum
        # Reads TF_CONFIG; blocks until every worker of the job has joined.
        return tf_parts.check_replicas(ctx, tf.distribute.MultiWorkerMirroredStrategy())

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        """MWMS's all-reduce cannot run inside Keras's conditional update: tfdist's train function picks
        between two compiled steps in Python (tfdist/aggregation_mwms.py)."""
        from tfdist import aggregation_mwms

        aggregation_mwms.install()
        setattr(optimizer, aggregation_mwms.MARK, steps)


MWMS = MultiWorkerMirrored()

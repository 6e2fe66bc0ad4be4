"""Makes Keras 3 `model.fit` / `evaluate` work under MultiWorkerMirroredStrategy.

Upstream Keras 3 (checked on 3.15.1 with TF 2.21; keras-team/keras#20585,
tensorflow/tensorflow#72388) fails in two places when there is one replica
per worker process:

1. `TensorFlowTrainer._maybe_symbolic_build` all-reduces the first *data*
   batch with `strategy.reduce("MEAN", batch)` just to learn its shapes; under
   MWMS that raises "Attempt to convert a value (PerReplica...) to a Tensor".
   It only needs shapes and dtypes, so we take this worker's local shard.
2. `reduce_per_replica(..., "auto")` reduces every log value with
   `strategy.reduce("MEAN", v, axis=0)`; losses and metric results are
   scalars, which have no axis 0 ("Invalid reduction dimension 0").
   For scalars we reduce with `axis=None` (mean over replicas).

We chose patching over moving users to tf_keras: the user's script stays a
plain Keras 3 script. The patch is applied by `tfdist.init()` only for
Keras 3 on the TensorFlow backend, only when the trainer still has the
functions it replaces; set TFDIST_KERAS_PATCH=0 to turn it off.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("tfdist")

_applied = False


def apply() -> bool:
    """Installs the fix once. Returns whether it is in place."""
    global _applied
    if _applied:
        return True
    if os.environ.get("TFDIST_KERAS_PATCH", "1") == "0":
        log.info("Keras 3 MWMS fix disabled by TFDIST_KERAS_PATCH=0")
        return False
    try:
        import keras
    except ImportError:
        return False
    major = int(keras.__version__.split(".")[0])
    if major != 3 or keras.backend.backend() != "tensorflow":
        return False
    try:
        from keras.src.backend.tensorflow import trainer as tf_trainer
    except ImportError:
        log.warning("Keras %s: trainer layout unknown, MWMS fix not applied", keras.__version__)
        return False
    needed = ("reduce_per_replica", "_collective_all_reduce_multi_worker")
    if not all(hasattr(tf_trainer, n) for n in needed) or \
            not hasattr(tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build"):
        log.warning("Keras %s: trainer layout unknown, MWMS fix not applied", keras.__version__)
        return False
    _install(tf_trainer)
    _applied = True
    log.debug("applied the Keras %s MWMS fix", keras.__version__)
    return True


def _install(tf_trainer) -> None:
    import tensorflow as tf
    from keras.src import tree

    upstream_reduce = tf_trainer.reduce_per_replica

    def local_shard(strategy, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        strategy = self.distribute_strategy
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tree.map_structure(lambda v: local_shard(strategy, v), next(it))
                break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not tf_trainer._collective_all_reduce_multi_worker(strategy):
            return upstream_reduce(values, strategy, reduction)

        def reduce_one(v):
            if local_shard(strategy, v).shape.rank == 0:
                return strategy.reduce("MEAN", v, axis=None)
            return upstream_reduce(v, strategy, reduction)

        return tree.map_structure(reduce_one, values)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    tf_trainer.reduce_per_replica = reduce_per_replica

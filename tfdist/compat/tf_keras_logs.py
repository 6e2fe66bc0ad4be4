"""tf_keras's progress bar under a mirrored strategy shows the true averages, not their sum over replicas.

tf_keras (checked on 2.21.0) reduces what each replica's `train_step`/`test_step` returns with
`Model.distribute_reduction_method`, whose default "auto" means "sum" on every strategy but a TPU one
(tf_keras/src/engine/training.py, `reduce_per_replica`; keras-team/keras#16664 made it so for custom steps
that divide their loss by the global batch). The stock steps return each replica's own metric results
(means), so with 2 workers the bar read `accuracy: 1.3041` where the epoch's value was 0.7628; the epoch's
final logs are right (they read the metrics in cross-replica context). With the stock steps and a
MirroredStrategy or MultiWorkerMirroredStrategy, this module makes the default reduction the mean over
replicas; a model with its own `train_step`/`test_step`, or a reduction set by the user, keeps tf_keras's.

Applied by `apply()` only where tf_keras is in use (TF_USE_LEGACY_KERAS set, or tf_keras imported): it
never imports tf_keras for a Keras 3 script. TFDIST_KERAS_PATCH=0 turns it off with the other fixes.
"""

from __future__ import annotations

import os
import sys

MEAN = "tfdist_mean"  # the reduction this module adds: the mean over replicas
_applied = False


def in_use() -> bool:
    """Whether this process's `tf.keras` is (or will be) tf_keras."""
    return "tf_keras" in sys.modules or os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")


def apply() -> bool:
    """Installs the mean once, where tf_keras is in use. Returns whether it is in place."""
    global _applied
    if _applied:
        return True
    if os.environ.get("TFDIST_KERAS_PATCH", "1") == "0" or not in_use():
        return False
    try:
        import tensorflow as tf
        from tf_keras.src.engine import training
    except ImportError:
        return False
    if not hasattr(training, "reduce_per_replica") or not isinstance(
            getattr(training.Model, "distribute_reduction_method", None), property):
        return False  # another tf_keras than the one this was written for: leave it alone
    stock = (training.Model.train_step, training.Model.test_step)
    reduce_per_replica = training.reduce_per_replica
    chosen = training.Model.distribute_reduction_method

    def distribute_reduction_method(self):
        if self._distribute_reduction_method is None and (type(self).train_step, type(self).test_step) == stock \
                and isinstance(self.distribute_strategy, (tf.distribute.MirroredStrategy,
                                                          tf.distribute.MultiWorkerMirroredStrategy)):
            return MEAN
        return chosen.fget(self)

    def reduce(values, strategy, reduction):
        if reduction != MEAN:
            return reduce_per_replica(values, strategy, reduction)
        return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)

    training.Model.distribute_reduction_method = property(distribute_reduction_method, chosen.fset,
                                                          doc=chosen.__doc__)
    training.reduce_per_replica = reduce
    _applied = True
    return True

"""Lets `horovod.tensorflow` 0.28.1 take Keras 3 variables (horovod#4290), so Horovod scripts written
for TF2 run unchanged on Keras 3: `DistributedGradientTape.gradient` and `broadcast_variables` get the
TensorFlow variables behind Keras 3 variables. Applied by tfdist's worker start-up when
`horovod.tensorflow` loads, and by `import_horovod()` (so by `tfdist.init()` in horovod mode and by
tfdist.horovod); TFDIST_KERAS_PATCH=0 turns it off."""

from __future__ import annotations

import os
import sys

from tfdist.compat import HOROVOD_INSTALL_HINT
from tfdist.errors import LaunchEnvironmentError

_applied = False


def import_horovod():
    """`horovod.tensorflow` with this fix applied, or one clear error naming the command that installs it."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise LaunchEnvironmentError(f"Horovod is not installed for {sys.executable} ({e}); "
                                     f"{HOROVOD_INSTALL_HINT}") from None
    apply(hvd)
    return hvd


def tf_variable(v):
    """The TensorFlow variable behind a Keras 3 variable (anything else passes through)."""
    import tensorflow as tf

    inner = getattr(v, "value", None)  # Keras 3 Variable -> tf.Variable; tf.Variable.value is a method
    return inner if isinstance(inner, tf.Variable) else v


def apply(hvd) -> bool:
    global _applied
    if _applied:
        return True
    if os.environ.get("TFDIST_KERAS_PATCH", "1") == "0":
        return False
    tape_class = hvd._DistributedGradientTape  # hvd.DistributedGradientTape copies its methods per call
    gradient, broadcast = tape_class.gradient, hvd.broadcast_variables

    def gradient_of_tf_variables(self, target, sources, *args, **kwargs):
        if isinstance(sources, (list, tuple)):
            sources = type(sources)(tf_variable(v) for v in sources)
        else:
            sources = tf_variable(sources)
        return gradient(self, target, sources, *args, **kwargs)

    def broadcast_tf_variables(variables, root_rank, *args, **kwargs):
        return broadcast([tf_variable(v) for v in variables], root_rank, *args, **kwargs)

    tape_class.gradient = gradient_of_tf_variables
    hvd.broadcast_variables = broadcast_tf_variables
    import horovod.tensorflow.functions as functions

    functions.broadcast_variables = broadcast_tf_variables
    _applied = True
    return True

"""Refuses Keras 3 variables under ParameterServerStrategy, the path that silently loses updates.

Keras 3 has no parameter-server support (keras-team/keras#18624): its `fit` refuses the strategy's
datasets, and a custom loop with `ClusterCoordinator.schedule` runs but loses optimizer updates, because
Keras 3's `assign_add` is not atomic under asynchronous workers (measured: 37 and 46 iterations of 60;
keras#18668). tfdist's ps mode runs tf_keras instead (`TF_USE_LEGACY_KERAS=1`, so `tf.keras` is tf_keras,
whose parameter-server `fit` counts every step). Creating a Keras 3 variable inside a
ParameterServerStrategy scope raises this module's error, naming the fix.
"""

from __future__ import annotations

from tfdist.errors import UserError

MESSAGE = ("Keras 3 variables under ParameterServerStrategy lose optimizer updates (Keras 3 has no parameter-server "
           "support, keras-team/keras#18624): build the model with tf.keras, which tfdist's ps mode makes tf_keras "
           "(TF_USE_LEGACY_KERAS=1): use `from tensorflow import keras` instead of `import keras`, or choose "
           "distribution.mode: mwms or horovod to keep Keras 3")

_applied = False


class KerasParameterServerError(UserError, TypeError):
    """A Keras 3 variable was created under ParameterServerStrategy."""


def _under_parameter_servers() -> bool:
    import tensorflow as tf

    return tf.distribute.has_strategy() and "ParameterServerStrategy" in type(tf.distribute.get_strategy()).__name__


def apply() -> bool:
    """Installs the check on Keras 3's variable class (no-op for tf_keras or without Keras 3)."""
    global _applied
    if _applied:
        return True
    try:
        from keras.src.backend.common import variables
    except ImportError:
        return False
    init = variables.Variable.__init__

    def checked_init(self, *args, **kwargs):
        if _under_parameter_servers():
            raise KerasParameterServerError(MESSAGE)
        init(self, *args, **kwargs)

    variables.Variable.__init__ = checked_init
    _applied = True
    return True

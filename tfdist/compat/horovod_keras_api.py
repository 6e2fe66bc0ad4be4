"""Horovod's Keras API (`horovod.tensorflow.keras`, `horovod.keras`; written for Keras 2) on Keras 3, so
scripts like Horovod's `tensorflow2_keras_mnist.py` run unchanged under tfdist's horovod mode.

What Keras 3 breaks there, and what is done about it (applied when one of those modules loads, by
tfdist/compat/keras_horovod.py; TFDIST_KERAS_PATCH=0 leaves Horovod as upstream has it):
- `DistributedOptimizer` subclasses the optimizer and all-reduces in `get_gradients`/`_compute_gradients`/
  `_aggregate_gradients`, which Keras 3 never calls: the ranks would train apart without a word (and its
  `variables` property calls a list). A Keras 3 optimizer gets tfdist.horovod.DistributedOptimizer instead
  (the all-reduce in the update, tfdist/compat/horovod_update.py), Horovod's arguments mapped; a process set
  other than the global one is refused.
- `BroadcastGlobalVariablesCallback` calls `var.ref()` on Keras 3 variables (horovod#4290): it broadcasts
  the TensorFlow variables behind them.
- `MetricAverageCallback` and the learning-rate callbacks call `keras.backend.constant/get_value/
  set_value`, which Keras 3 removed, and read `optimizer.lr` (Keras 3: `learning_rate`): they get a
  backend with those three, and `lr` answers. Momentum correction is skipped with one line where momentum
  is a number compiled into the step (Keras 3's SGD), not a variable.
- `load_model` wraps the optimizer through `custom_objects`, which Keras 3 passes by for its own optimizers
  (the loaded model would train apart): the loaded optimizer is made distributed afterwards.
- `model.compile(experimental_run_tf_function=False)` (Horovod's examples pass it so gradients go through
  the optimizer: what Keras 3 always does) is accepted and ignored.
Everything else in those modules is Horovod's own.
"""

from __future__ import annotations

import sys

from tfdist.compat import horovod_update
from tfdist.compat.keras_variables import tf_variable
from tfdist.errors import UserError

_keras_applied = False


class UnsupportedHorovodArgument(UserError):
    """A Horovod argument tfdist's Keras 3 adapter cannot honour."""


def apply(module) -> None:
    """Fixes `module` (horovod.tensorflow.keras or horovod.keras) for Keras 3 optimizers."""
    from tfdist.compat import tf_keras_logs

    if tf_keras_logs.in_use():
        return
    _fix_keras()
    _fix_callbacks()
    module.callbacks.K = _Backend
    _local_variables_as_tf_variables(module.callbacks.BroadcastGlobalVariablesCallback)
    original = module.DistributedOptimizer
    if getattr(original, "_tfdist_keras3", False):
        return

    def DistributedOptimizer(optimizer, *args, **kwargs):  # noqa: N802 (Horovod's name)
        if not _keras3_optimizer(optimizer):
            return original(optimizer, *args, **kwargs)
        return distributed_optimizer(optimizer, **_named(original, args, kwargs))

    DistributedOptimizer._tfdist_keras3 = True
    DistributedOptimizer.__doc__ = original.__doc__
    module.DistributedOptimizer = DistributedOptimizer

    def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None, legacy_opts=False):
        """Keras 3 deserializes its own optimizers by name, past Horovod's wrapping custom_objects: the
        loaded model's optimizer is made distributed afterwards."""
        import keras

        objects = {**{c.__name__: c for c in custom_optimizers or ()}, **(custom_objects or {})}
        model = keras.models.load_model(filepath, custom_objects=objects)
        if _keras3_optimizer(getattr(model, "optimizer", None)):
            distributed_optimizer(model.optimizer, compression=compression)
        return model

    load_model.__doc__ = (module.load_model.__doc__ or "") + load_model.__doc__
    module.load_model = load_model


def _named(function, args, kwargs) -> dict:
    """Horovod's positional arguments (after the optimizer) by name."""
    import inspect

    names = list(inspect.signature(function).parameters)[1:]
    return {**dict(zip(names, args)), **kwargs}


def _keras3_optimizer(optimizer) -> bool:
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    return isinstance(optimizer, BaseOptimizer)


def distributed_optimizer(optimizer, name=None, device_dense="", device_sparse="", compression=None,
                          sparse_as_dense=False, gradient_predivide_factor=1.0, op=None, backward_passes_per_step=1,
                          average_aggregated_gradients=False, num_groups=0, groups=None, process_set=None,
                          scale_local_gradients=True):
    """Horovod's DistributedOptimizer for a Keras 3 optimizer: the same optimizer, its gradients averaged
    (or summed: op=hvd.Sum) over the ranks in its update. Devices, name and fusion groups are hints Horovod
    uses for speed; every gradient here is reduced densely in one grouped all-reduce."""
    import horovod.tensorflow as hvd

    if process_set is not None and process_set.process_set_id != hvd.global_process_set.process_set_id:
        raise UnsupportedHorovodArgument(
            "DistributedOptimizer(process_set=...): tfdist's Keras 3 adapter reduces over every rank only; "
            "leave process_set out (docs/modes.md, Horovod on Keras 3)")
    op = hvd.Average if op is None else op
    if op not in (hvd.Average, hvd.Sum):
        raise UnsupportedHorovodArgument(f"DistributedOptimizer(op={op!r}): only hvd.Average and hvd.Sum are "
                                         "supported with Keras (as in Horovod itself)")
    k = int(backward_passes_per_step)
    options = {"op": op, "prescale_factor": 1.0, "postscale_factor": 1.0}
    if gradient_predivide_factor != 1.0 and op == hvd.Average:  # Horovod's split of the average
        options.update(prescale_factor=1.0 / gradient_predivide_factor, postscale_factor=gradient_predivide_factor)
    if k > 1:  # Keras 3's own accumulation: the update gets the mean of the k passes; Horovod's default sums them
        optimizer.gradient_accumulation_steps = k
        if not average_aggregated_gradients:
            options["postscale_factor"] *= k
    compressor = hvd.Compression.none if compression is None else compression
    return horovod_update.reduce_in_update(
        optimizer, lambda grads: horovod_update.allreduce_gradients(grads, compressor, **options))


class _Backend:
    """The three Keras 2 backend functions Horovod's Keras callbacks use in eager mode."""

    _said_momentum = False

    @staticmethod
    def constant(value, dtype=None, shape=None, name=None):
        import tensorflow as tf

        return tf.constant(value, dtype=dtype or "float32", shape=shape)

    @staticmethod
    def get_value(x):
        return x.numpy() if hasattr(x, "numpy") else x

    @classmethod
    def set_value(cls, x, value) -> None:
        if hasattr(x, "assign"):
            x.assign(value)
        elif not cls._said_momentum:  # a Python number: Keras 3 SGD's momentum, fixed when the step compiled
            cls._said_momentum = True
            sys.stderr.write("tfdist: Horovod's momentum correction is skipped: Keras 3 compiles the optimizer's "
                             "momentum into the training step as a constant\n")


def _fix_keras() -> None:
    """`optimizer.lr` (Keras 2's name) and `compile(experimental_run_tf_function=...)` on Keras 3."""
    global _keras_applied
    if _keras_applied:
        return
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from keras.src.trainers.trainer import Trainer

    if not hasattr(BaseOptimizer, "lr"):
        def _get_lr(self):
            return self._learning_rate if hasattr(self._learning_rate, "assign") else self.learning_rate

        def _set_lr(self, value):
            self.learning_rate = value

        BaseOptimizer.lr = property(_get_lr, _set_lr, doc="Keras 2's name of the learning rate (its variable)")
    compile_ = Trainer.compile

    def compile(self, *args, experimental_run_tf_function=None, **kwargs):  # noqa: A001 (Keras's name)
        return compile_(self, *args, **kwargs)

    compile.__doc__, compile.__wrapped__ = compile_.__doc__, compile_
    Trainer.compile = compile
    _keras_applied = True


def _fix_callbacks() -> None:
    """The broadcast callback on the TensorFlow variables behind Keras 3 variables (horovod#4290)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf
    from horovod._keras import callbacks as impl

    cls = impl.BroadcastGlobalVariablesCallbackImpl
    if getattr(cls, "_tfdist_keras3", False):
        return

    def register_local_var(self, var):
        self._local_vars.add(tf_variable(var).ref())

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        with tf.device(self.device):
            variables = [tf_variable(v) for v in self.model.variables]
            hvd.broadcast_variables([v for v in variables if v.ref() not in self._local_vars], root_rank=self.root_rank)
            hvd.broadcast_variables([tf_variable(v) for v in self.model.optimizer.variables], root_rank=self.root_rank)
        self.broadcast_done = True

    cls.register_local_var, cls.on_batch_end, cls._tfdist_keras3 = register_local_var, on_batch_end, True


def _local_variables_as_tf_variables(cls) -> None:
    """Horovod checks `local_variables` are tf.Variables: Keras 3 variables are given as the ones behind them."""
    if getattr(cls.__init__, "_tfdist_keras3", False):
        return
    init = cls.__init__

    def __init__(self, root_rank, device="", local_variables=None):
        if local_variables is not None:
            many = isinstance(local_variables, (list, tuple, set))
            local_variables = [tf_variable(v) for v in local_variables] if many else tf_variable(local_variables)
        init(self, root_rank, device, local_variables)

    __init__._tfdist_keras3 = True
    cls.__init__ = __init__

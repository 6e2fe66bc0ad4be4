"""Horovod for Keras 3: the distributed gradient tape, the initial broadcast, gradient averaging in
`fit`, and metric averaging, through tfdist.

Horovod 0.28.1 (its last release) predates Keras 3: `hvd.DistributedGradientTape` and
`hvd.broadcast_variables` fail on Keras 3 variables (`'Variable' object has no attribute 'ref'`,
horovod#4290) and `horovod.tensorflow.keras` imports Keras 3 and breaks. Horovod works on the TensorFlow
variables behind them (`v.value`), so these adapters hand it those. Under `tfdist launch
--distribution horovod` the same mapping is also applied to `horovod.tensorflow` itself when it loads
(tfdist/compat/keras_horovod.py), so existing Horovod scripts run unchanged.

    ctx = tfdist.init()                       # runs hvd.init()
    model.compile(optimizer=tfdist.horovod.DistributedOptimizer(keras.optimizers.SGD(0.01 * ctx.size)), ...)
    model.fit(ds.batch(ctx.per_worker_batch_size), callbacks=[
        tfdist.horovod.BroadcastGlobalVariablesCallback(), tfdist.horovod.MetricAverageCallback()])

Gradient compression comes from the config (`optimizations.gradient_compression: fp16`) unless passed.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import tensorflow as tf

from tfdist import envvars
from tfdist.aggregation import aggregate_gradients
from tfdist.compat import horovod_update
from tfdist.compat.keras_horovod import import_horovod
from tfdist.compat.keras_variables import tf_variable

__all__ = ["BroadcastGlobalVariablesCallback", "DistributedGradientTape", "DistributedOptimizer",
           "MetricAverageCallback", "allreduce_gradients", "broadcast_variables", "compression", "import_horovod"]


def compression(name: str | None = None):
    """Horovod's compressor for `name` (default: the config's optimizations.gradient_compression)."""
    hvd = import_horovod()
    name = name or os.environ.get(envvars.GRADIENT_COMPRESSION, "none")
    choices = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}
    if name not in choices:
        raise ValueError(f"gradient compression must be one of {', '.join(choices)}, got {name!r}")
    return choices[name]


def DistributedGradientTape(tape, compression_name: str | None = None, **kwargs):  # noqa: N802 (Horovod's name)
    """`hvd.DistributedGradientTape` that accepts Keras 3 variables as sources."""
    hvd = import_horovod()
    return hvd.DistributedGradientTape(tape, compression=compression(compression_name), **kwargs)


def broadcast_variables(variables: Iterable[Any], root_rank: int = 0) -> None:
    """Sets every rank's variables to `root_rank`'s (the initial broadcast)."""
    hvd = import_horovod()
    hvd.broadcast_variables([tf_variable(v) for v in variables], root_rank=root_rank)


def allreduce_gradients(grads: list, compression_name: str | None = None, **allreduce_options) -> list:
    """Averages gradients over every rank (None gradients stay None). `allreduce_options`: Horovod's
    `op` (default hvd.Average) and `prescale_factor`/`postscale_factor`."""
    import_horovod()
    return horovod_update.allreduce_gradients(grads, compression(compression_name), **allreduce_options)


def DistributedOptimizer(optimizer, compression_name: str | None = None,  # noqa: N802 (Horovod's name)
                         aggregation_frequency: int | None = None):
    """Makes a Keras 3 optimizer average gradients over every rank before applying them (what
    `hvd.keras.DistributedOptimizer` does for Keras 2). With an aggregation frequency k (default: the
    config's optimizations.aggregation_frequency) gradients accumulate locally and are averaged once
    every k steps: the all-reduce sits where the update happens. Returns the same optimizer."""
    aggregate_gradients(optimizer, aggregation_frequency)
    return horovod_update.reduce_in_update(optimizer, lambda grads: allreduce_gradients(grads, compression_name))


def _keras():
    import keras

    return keras


class BroadcastGlobalVariablesCallback(_keras().callbacks.Callback):
    """Broadcasts the model's and optimizer's variables from `root_rank` when training starts, so every
    rank starts from the same weights (and again after the first batch if the optimizer only built
    its variables then)."""

    def __init__(self, root_rank: int = 0):
        super().__init__()
        if isinstance(root_rank, bool) or not isinstance(root_rank, int) or root_rank < 0:
            raise ValueError(f"root_rank must be a rank (an integer >= 0). Received: root_rank={root_rank!r}")
        self.root_rank = root_rank
        self._optimizer_done = False

    def _broadcast(self) -> None:
        variables = list(self.model.variables)
        optimizer_vars = list(getattr(self.model.optimizer, "variables", []) or [])
        self._optimizer_done = bool(optimizer_vars)
        broadcast_variables(variables + optimizer_vars, self.root_rank)

    def on_train_begin(self, logs=None):
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self._optimizer_done:
            self._broadcast()


class MetricAverageCallback(_keras().callbacks.Callback):
    """Averages the epoch's logged metrics over every rank, so each rank (and its checkpoints or early
    stopping) sees the job's numbers, not its own shard's."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        hvd = import_horovod()
        if hvd.size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if isinstance(v, (int, float)) or hasattr(v, "numpy"))
        values = hvd.allreduce(tf.constant([float(logs[k]) for k in keys], tf.float64), op=hvd.Average,
                               name=f"tfdist_metrics_epoch_{epoch}")
        for k, v in zip(keys, values.numpy().tolist()):
            logs[k] = v

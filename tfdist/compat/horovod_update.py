"""The Horovod all-reduce in a Keras 3 optimizer's update: what tfdist.horovod.DistributedOptimizer and the
adapted `hvd.DistributedOptimizer` (tfdist/compat/horovod_keras_api.py) both do. Keras 3 computes gradients
itself and calls the optimizer's update step (every step, or every k-th with its gradient accumulation), so
the all-reduce sits there. Called once Horovod is imported; imports nothing of tfdist."""

from __future__ import annotations

from typing import Callable


def allreduce_gradients(grads: list, compression, op=None, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> list:
    """One grouped all-reduce of every gradient (None gradients stay None); `compression` is Horovod's
    compressor, `op` hvd.Average (default) or hvd.Sum."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    present = [i for i, g in enumerate(grads) if g is not None]
    if not present or (hvd.size() == 1 and prescale_factor * postscale_factor == 1.0):
        return list(grads)
    reduced = hvd.grouped_allreduce([tf.convert_to_tensor(grads[i]) for i in present],
                                    op=hvd.Average if op is None else op, compression=compression,
                                    prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    result = list(grads)
    for i, g in zip(present, reduced):
        result[i] = g
    return result


def reduce_in_update(optimizer, reduce: Callable[[list], list]):
    """Makes `optimizer` (Keras 3) apply `reduce(gradients)` instead of its gradients. Returns it."""
    update = optimizer._backend_update_step

    def averaged_update(grads, trainable_variables, learning_rate):
        return update(reduce(list(grads)), trainable_variables, learning_rate)

    optimizer._backend_update_step = averaged_update
    return optimizer

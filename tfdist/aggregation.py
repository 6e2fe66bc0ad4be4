"""`optimizations.aggregation_frequency: k`: gradients accumulate locally for k steps and are all-reduced
once, so collectives fall k-fold; each update then averages k x global batch examples (the effective
batch, logged). Under Horovod, Keras 3's own gradient accumulation does it (tfdist.horovod's all-reduce
sits in the update, which runs every k-th step); under MWMS, whose all-reduce TensorFlow refuses inside
Keras's conditional update, tfdist's train function chooses between two compiled steps in Python
(tfdist/aggregation_mwms.py). Each mode says which (`aggregate_gradients`, tfdist/modes/).

    optimizer = tfdist.aggregate_gradients(keras.optimizers.SGD(0.1))   # before compile
"""

from __future__ import annotations

import logging
import os

from tfdist import envvars
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes import worker_mode
from tfdist.runtime import current

log = logging.getLogger("tfdist")


def aggregation_frequency() -> int:
    raw = os.environ.get(envvars.AGGREGATION_FREQUENCY, "1")
    try:
        k = int(raw)
    except ValueError:
        k = 0
    if k < 1:
        raise LaunchEnvironmentError(f"{envvars.AGGREGATION_FREQUENCY}={raw!r} is not an integer >= 1")
    return k


def aggregate_gradients(optimizer, frequency: int | None = None):
    """Makes a Keras 3 optimizer apply (and all-reduce) gradients every `frequency` steps (default: the
    config's optimizations.aggregation_frequency). Call before the optimizer is built (before fit).
    Returns the same optimizer."""
    k = aggregation_frequency() if frequency is None else frequency
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`frequency` must be a positive integer. Received: frequency={k!r}")
    if k == 1:
        return optimizer
    if not hasattr(optimizer, "gradient_accumulation_steps"):
        raise ValueError("aggregation_frequency needs a Keras 3 optimizer (it uses its gradient accumulation); "
                         f"got {type(optimizer).__module__}.{type(optimizer).__name__}")
    if getattr(optimizer, "built", False):
        raise ValueError("aggregate_gradients() must run before the optimizer is built: call it before "
                         "model.fit or optimizer.build")
    ctx = current()
    worker_mode(ctx.distribution).aggregate_gradients(optimizer, k)
    if ctx.is_chief:
        batch = ctx.effective_global_batch_size
        effective = f"{k} x {batch} = {k * batch} examples" if batch else f"{k} x the global batch"
        log.info("aggregation_frequency %d: gradients are all-reduced every %d steps; effective batch %s "
                 "per update", k, k, effective)
    return optimizer

"""Workload of benchmarks/aggregation.py: Keras 3 fit under tfdist's Horovod or MWMS mode with an MLP of
about 1.1M parameters (4.4 MB of gradients per all-reduce), gradients aggregated every k steps (the
config's optimizations.aggregation_frequency; tfdist.horovod's optimizer or tfdist.aggregate_gradients). Prints `BENCH {"examples_per_s": ...}` on rank 0, timed after a
warm-up inside the workload.

    python aggregation_worker.py STEPS
"""
import json
import sys

import numpy as np

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64})
import keras  # noqa: E402
from step_clock import StepClock  # noqa: E402

steps = int(sys.argv[1])
horovod = ctx.distribution == "horovod"
WARMUP = 16  # a multiple of every k used
per_rank = ctx.per_worker_batch_size
clock = StepClock(WARMUP, steps)


def build():
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, activation="relu"),
                              keras.layers.Dense(512, activation="relu"), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.01)
    model.compile(optimizer=thvd.DistributedOptimizer(optimizer) if horovod else tfdist.aggregate_gradients(optimizer),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


if horovod:  # one process per rank with its own data; Horovod all-reduces in the optimizer
    import tfdist.horovod as thvd

    x = np.random.RandomState(ctx.rank).rand(per_rank * (steps + WARMUP), 512).astype("float32")
    y = (x.sum(1) > 256).astype("int32")
    build().fit(x, y, batch_size=per_rank, epochs=1, verbose=0, shuffle=False,
                callbacks=[thvd.BroadcastGlobalVariablesCallback(0), clock])
else:  # MWMS: the global batch, sharded by the strategy; repeated, so no end-of-data collective per step
    import tensorflow as tf

    x = np.random.RandomState(0).rand(ctx.effective_global_batch_size * 8, 512).astype("float32")
    y = (x.sum(1) > 256).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.effective_global_batch_size).repeat()
    with ctx.strategy.scope():
        model = build()
    model.fit(data, steps_per_epoch=steps + WARMUP, epochs=1, verbose=0, callbacks=[clock])
if ctx.is_chief:
    print("BENCH " + json.dumps({"examples_per_s": steps * per_rank * ctx.size / clock.seconds}),
          flush=True)

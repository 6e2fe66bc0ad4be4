"""Workload of benchmarks/aggregation.py: Keras 3 fit under tfdist's Horovod mode with an MLP of about
1.1M parameters (4.4 MB of gradients per all-reduce), gradients aggregated every k steps (the config's
optimizations.aggregation_frequency). Prints `BENCH {"examples_per_s": ...}` on rank 0, timed after a
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
import tfdist.horovod as thvd  # noqa: E402

steps = int(sys.argv[1])
WARMUP = 16  # a multiple of every k used
per_rank = ctx.per_worker_batch_size
x = np.random.RandomState(ctx.rank).rand(per_rank * (steps + WARMUP), 512).astype("float32")
y = (x.sum(1) > 256).astype("int32")
model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=thvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


clock = StepClock(WARMUP, steps)
model.fit(x, y, batch_size=per_rank, epochs=1, verbose=0, shuffle=False,
          callbacks=[thvd.BroadcastGlobalVariablesCallback(0), clock])
if ctx.is_chief:
    print("BENCH " + json.dumps({"examples_per_s": steps * per_rank * ctx.size / clock.seconds}),
          flush=True)

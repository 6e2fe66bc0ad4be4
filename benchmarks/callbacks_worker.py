"""Workload of benchmarks/callbacks_overhead.py: Keras 3 fit of an MLP (256-1024-1024-10, batch 256: a
step of some milliseconds here), timed per step after a warm-up, with or without tfdist's callbacks.
Prints `BENCH {"seconds_per_step": ...}`.

    python callbacks_worker.py with|without|metrics|watchdog|warmup STEPS
"""
import json
import sys
import time

import numpy as np

import tfdist

ctx = tfdist.init()
import keras  # noqa: E402
from step_clock import StepClock  # noqa: E402

from tfdist.callbacks import LearningRateWarmup, MetricsReporter, StepWatchdog  # noqa: E402

variant, steps = sys.argv[1], int(sys.argv[2])
WARMUP = 20
BATCH = 256
x = np.random.RandomState(0).rand(BATCH * (steps + WARMUP), 256).astype("float32")
y = (x.sum(1) > 128).astype("int32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


clock = StepClock(WARMUP, steps)
callbacks = [clock]
if variant in ("with", "metrics"):
    callbacks.append(MetricsReporter(every_n_batches=50))
if variant in ("with", "watchdog"):
    callbacks.append(StepWatchdog())
if variant in ("with", "warmup"):
    callbacks.append(LearningRateWarmup(warmup_steps=steps, multiplier=8))
model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
print("BENCH " + json.dumps({"seconds_per_step": clock.seconds / steps}), flush=True)

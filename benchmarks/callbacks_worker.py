"""Workload of benchmarks/callbacks_overhead.py: Keras 3 fit of a small MLP, timed per step after a
warm-up, with or without tfdist's callbacks. Prints `BENCH {"seconds_per_step": ...}`.

    python callbacks_worker.py with|without STEPS
"""
import json
import sys
import time

import numpy as np

import tfdist

ctx = tfdist.init()
import keras  # noqa: E402

from tfdist.callbacks import LearningRateWarmup, MetricsReporter, StepWatchdog  # noqa: E402

variant, steps = sys.argv[1], int(sys.argv[2])
WARMUP = 20
x = np.random.RandomState(0).rand(64 * (steps + WARMUP), 64).astype("float32")
y = (x.sum(1) > 32).astype("int32")
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Clock(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == WARMUP - 1:
            self.start = time.perf_counter()
        if batch == WARMUP + steps - 1:
            self.end = time.perf_counter()


clock = Clock()
callbacks = [clock]
if variant == "with":
    callbacks += [MetricsReporter(every_n_batches=50), StepWatchdog(), LearningRateWarmup(warmup_steps=steps)]
model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=callbacks)
print("BENCH " + json.dumps({"seconds_per_step": (clock.end - clock.start) / steps}), flush=True)

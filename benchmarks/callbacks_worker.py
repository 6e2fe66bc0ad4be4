"""Workload of benchmarks/callbacks_overhead.py: Keras 3 fit of an MLP (256-1024-1024-10, batch 256: a
step of some milliseconds here), timed per step after a warm-up, with or without tfdist's callbacks.
Prints `BENCH {"seconds_per_step": ...}`.

    python callbacks_worker.py with|without|saving|direct|metrics|watchdog|warmup|checkpoint STEPS

`with` runs every callback's per-step hooks (Checkpoint with saves too rare to happen: its per-step work
is the preemption check); `saving` adds a checkpoint every 100 steps; `direct` calls the hooks in a loop.
"""
import json
import sys
import time

import numpy as np

import tfdist

ctx = tfdist.init()
import keras  # noqa: E402
from step_clock import StepClock  # noqa: E402

from tfdist.callbacks import Checkpoint, LearningRateWarmup, MetricsReporter, StepWatchdog  # noqa: E402

variant, steps = sys.argv[1], int(sys.argv[2])
WARMUP = 20
BATCH = 256
x = np.random.RandomState(0).rand(BATCH * (steps + WARMUP), 256).astype("float32")
y = (x.sum(1) > 128).astype("int32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))




def tfdist_callbacks(which: str) -> list:
    chosen = []
    if which in ("with", "saving", "direct", "metrics"):
        chosen.append(MetricsReporter(every_n_batches=50))
    if which in ("with", "saving", "direct", "watchdog"):
        chosen.append(StepWatchdog())
    if which in ("with", "saving", "direct", "warmup"):
        chosen.append(LearningRateWarmup(warmup_steps=steps, multiplier=8))
    if which in ("with", "direct", "checkpoint"):
        chosen.append(Checkpoint(save_freq=10 * (steps + WARMUP)))  # never saves: the per-step checks alone
    if which == "saving":
        chosen.append(Checkpoint(save_freq=100))
    return chosen


if variant == "direct":
    # tfdist's own cost per step, without the noise of training: every hook the callbacks run in a step,
    # called directly in a loop on a built model (the every-50 reports and the warmup's stairs included).
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0)
    hooks = tfdist_callbacks("direct")
    logs = {"loss": 0.5}
    for cb in hooks:
        cb.set_model(model)
        cb.set_params({"steps": steps, "epochs": 1})
        cb.on_train_begin()
    start = time.perf_counter()
    for i in range(steps):
        for cb in hooks:
            cb.on_train_batch_begin(i)
        for cb in hooks:
            cb.on_train_batch_end(i, logs)
    print("BENCH " + json.dumps({"seconds_per_step": (time.perf_counter() - start) / steps}), flush=True)
    sys.exit(0)

clock = StepClock(WARMUP, steps)
callbacks = [clock] + ([] if variant == "without" else tfdist_callbacks(variant))
model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
print("BENCH " + json.dumps({"seconds_per_step": clock.seconds / steps}), flush=True)

"""Keras 3 `fit` with tfdist.callbacks.Checkpoint under MWMS or Horovod, for the restart and preemption tests.

The chief appends "attempt step" to $OUT/steps.txt after every step (the optimizer's step count), so the
test sees which steps each run trained; it saves the final weights to $OUT/weights.npz. Every rank writes
its pid to $OUT/pid-rankN. KILL_AT=S: rank 1 of the first run SIGKILLs itself after step S. SLOW=T: every
rank sleeps T seconds after each step (time for a preemption to arrive mid-run), in the job's first
SLOW_RUNS runs only (default: every run; a run after the last one a test interrupts need not wait).
"""

import os
import signal
import time

import numpy as np

import tfdist

ctx = tfdist.init()

import tensorflow as tf  # noqa: E402

from tfdist.callbacks import Checkpoint, MetricsReporter  # noqa: E402

OUT = os.environ["OUT"]
STEPS_PER_EPOCH, EPOCHS, GLOBAL_BATCH = 10, 3, 8
KILL_AT = int(os.environ.get("KILL_AT", "0"))
SLOW = float(os.environ.get("SLOW", "0")) if ctx.attempt < int(os.environ.get("SLOW_RUNS", "1000")) else 0.0
with open(os.path.join(OUT, f"pid-rank{ctx.rank}"), "w") as f:
    f.write(str(os.getpid()))

rng = np.random.RandomState(0)
x = rng.rand(GLOBAL_BATCH * STEPS_PER_EPOCH * EPOCHS, 4).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
horovod = ctx.distribution == "horovod"
# Global batches, repeated, less the ones already trained: exactly once across restarts. Horovod ranks
# each take their part of every global batch themselves.
data = tf.data.Dataset.from_tensor_slices((x, y))
if horovod:
    data = data.shard(ctx.size, ctx.rank)
dataset = data.batch(GLOBAL_BATCH // (ctx.size if horovod else 1), drop_remainder=True).repeat() \
    .skip(ctx.resume_step)

with ctx.strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="tanh",
                                                                             kernel_initializer="glorot_uniform"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(0.01)
    if horovod:
        import tfdist.horovod as thvd

        optimizer = thvd.DistributedOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss="mse")
tf.keras.utils.set_random_seed(1)  # identical initial weights in every run (before the first build below)
model.set_weights([np.random.RandomState(i).uniform(-0.5, 0.5, w.shape).astype("float32")
                   for i, w in enumerate(model.get_weights())])


class Record(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if ctx.is_chief:
            with open(os.path.join(OUT, "steps.txt"), "a") as f:
                f.write(f"{ctx.attempt} {step}\n")
        if KILL_AT and ctx.attempt == 0 and ctx.rank == 1 and step == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        if SLOW:
            time.sleep(SLOW)


# Record runs first: its line for a step is written before Checkpoint may stop the run at that step.
model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
          callbacks=[Record(), Checkpoint(save_freq=int(os.environ.get("SAVE_FREQ", "5"))),
                     MetricsReporter(tensorboard=True)] + ([thvd.BroadcastGlobalVariablesCallback(0)] if horovod else []))
if ctx.is_chief:
    np.savez(os.path.join(OUT, "weights.npz"), *model.get_weights())
print(f"rank {ctx.rank} done at step {int(model.optimizer.iterations.numpy())}", flush=True)

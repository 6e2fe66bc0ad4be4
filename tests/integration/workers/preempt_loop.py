"""A custom training loop (strategy.run) that checks ctx.should_preempt() at every step, as
examples/custom_loop does, slowed down by SLOW seconds a step so a preemption lands mid-run.
Every rank writes its pid to $OUT/pid-rankN."""

import os
import sys
import time

import tfdist

ctx = tfdist.init()

import tensorflow as tf  # noqa: E402

OUT = os.environ["OUT"]
with open(os.path.join(OUT, f"pid-rank{ctx.rank}"), "w") as f:
    f.write(str(os.getpid()))
with ctx.strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
step = tfdist.restore_checkpoint(checkpoint)
x = tf.ones((4, 4))


@tf.function
def train_step():
    def replica_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    ctx.strategy.run(replica_step)


while step < 1000:
    train_step()
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(float(os.environ.get("SLOW", "0.2")))
    if ctx.should_preempt(step):
        path = tfdist.save_checkpoint(checkpoint, step)
        print(f"stopping at step {step}" + (f", saved {path}" if path else ""), flush=True)
        sys.exit(0)
print("ran to the end without a preemption", flush=True)
sys.exit(1)

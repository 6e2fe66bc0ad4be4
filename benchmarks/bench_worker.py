"""The training script both launchers run: plain TF + Keras 3, custom loop, MWMS.

Prints `BENCH first_step=<unix time>` after the first step completes on the chief.
With `--use-tfdist` it joins through `tfdist.init()` instead of building the strategy itself.
"""

import json
import os
import sys
import time

USE_TFDIST = "--use-tfdist" in sys.argv
if USE_TFDIST:
    import tfdist

    strategy = tfdist.init().strategy
    import tensorflow as tf
else:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

import keras  # noqa: E402
import numpy as np  # noqa: E402

task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = np.random.RandomState(0).rand(1024, 32).astype("float32")
y = (x.sum(1) > 16).astype("int32")
batch = 64
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1)
    model.build((None, 32))
    opt.build(model.trainable_variables)
loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def dataset_fn(ctx):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.repeat().batch(batch // strategy.num_replicas_in_sync)


it = iter(strategy.distribute_datasets_from_function(dataset_fn))


@tf.function
def step(iterator):
    def fn(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb)), global_batch_size=batch)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(fn, args=next(iterator)), axis=None)


step(it)
if task == 0:
    print(f"BENCH first_step={time.time():.6f}", flush=True)
for _ in range(60):
    step(it)

"""A plain Keras `fit` whose rank 1 hangs inside training (in a callback of the script's own, at its 4th
batch), the way a stuck input pipeline or collective does. Nothing in it reports progress: tfdist's `fit`
does that by itself."""

import time

import tfdist

ctx = tfdist.init()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
x = np.random.RandomState(0).rand(1024, 4).astype("float32")
y = (x.sum(1) > 2).astype("int32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).with_options(options)
with ctx.strategy.scope():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def batch_end(batch, logs):
    if ctx.rank == 1 and batch == 3:
        print("rank 1 hangs inside fit", flush=True)
        time.sleep(600)


model.fit(train, epochs=3, verbose=0, callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=batch_end)])
print(f"rank {ctx.rank} done", flush=True)

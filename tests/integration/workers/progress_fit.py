"""A tiny Keras `fit` with validation data and Keras's default progress bar on every rank (as users write it):
Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1. Each step is slowed a little so updates ship while an epoch
runs. Rank 0 prints its last batch's logs (what the bar showed last) beside the epoch's."""

import time

import tfdist

ctx = tfdist.init()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras  # Keras 3, or tf_keras
x = np.random.RandomState(0).rand(512, 4).astype("float32")
y = (x.sum(1) > 2).astype("int32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).with_options(options)
val = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(16).with_options(options)
with ctx.strategy.scope():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(8, activation="relu")(inputs)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

seen = {}


def batch_end(batch, logs):
    seen["batch"] = {k: round(float(v), 4) for k, v in logs.items()}
    time.sleep(0.02)


def epoch_end(epoch, logs):
    if ctx.is_chief:
        train_logs = {k: round(float(v), 4) for k, v in logs.items() if not k.startswith("val_")}
        print(f"epoch {epoch + 1}: last batch {seen['batch']} epoch {train_logs}", flush=True)


model.fit(train, epochs=2, validation_data=val,
          callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=batch_end, on_epoch_end=epoch_end)])
print(f"rank {ctx.rank} done", flush=True)

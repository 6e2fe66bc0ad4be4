"""A tiny Keras `fit` that trains until it is canceled (at most ~10 minutes), reporting its metrics every few
batches: something for Prometheus and the dashboard to watch."""

import time

import tfdist
from tfdist.callbacks import MetricsReporter

ctx = tfdist.init()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
x = np.random.RandomState(0).rand(256, 4).astype("float32")
y = (x.sum(1) > 2).astype("int32")
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
with ctx.strategy.scope():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.05))
model.fit(train, steps_per_epoch=20, epochs=600, verbose=0, callbacks=[MetricsReporter(every_n_batches=5), slow])

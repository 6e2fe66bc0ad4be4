"""An ordinary MWMS Keras script, the kind `tfdist diagnose` is run on: tf.data input from memory,
`model.fit` for more steps than diagnose lets it take. INPUT_SLEEP (seconds) slows its input pipeline."""

import os
import time

import numpy as np
import tensorflow as tf
import keras

strategy = tf.distribute.MultiWorkerMirroredStrategy()
sleep = float(os.environ.get("INPUT_SLEEP", "0"))
x = np.random.default_rng(0).random((2048, 32), dtype=np.float32)
dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)
if sleep:
    dataset = dataset.map(lambda a, b: tf.numpy_function(lambda a, b: (time.sleep(sleep), a, b)[1:], [a, b],
                                                         [tf.float32, tf.float32]))
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
history = model.fit(dataset, epochs=1, steps_per_epoch=5000, verbose=0)
print(f"fit returned after {model.optimizer.iterations.numpy()} steps")

"""A worker for the failure-detection benchmark: plain MultiWorkerMirroredStrategy reading TF_CONFIG
itself (no tfdist import), a custom training loop that runs until stopped, one line per step."""

import json
import os
import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
with strategy.scope():
    w = tf.Variable(tf.zeros((8, 1)))
    optimizer = tf.keras.optimizers.SGD(0.01)

x = np.random.RandomState(task).rand(64, 8).astype("float32")


@tf.function
def step():
    def replica():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss
    return strategy.reduce("SUM", strategy.run(replica), axis=None)


i = 0
while True:
    loss = float(step())
    print(f"task {task} step {i} loss {loss:.4f}", flush=True)
    i += 1
    time.sleep(0.05)

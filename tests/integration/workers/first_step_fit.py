"""A small Keras `fit` under MultiWorkerMirroredStrategy that stamps its start-up for
benchmarks/kubernetes_first_step.py: the same script under `tfdist launch` (TF_CONFIG from tfdist) and as a plain
pod (no TF_CONFIG: one local worker). The chief (task 0, or the only process) prints wall-clock times
(time.time(), comparable with the client's: the pods run on this machine's kernel):

    STAMP script_start T   before any import
    STAMP tf_imported T    after `import tensorflow`
    STAMP first_step T     at the end of the first training step
"""
import time

START = time.time()

import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

IMPORTED = time.time()
task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
chief = task.get("index", 0) == 0


def stamp(what: str, when: float) -> None:
    if chief:
        print(f"STAMP {what} {when:.6f}", flush=True)


stamp("script_start", START)
stamp("tf_imported", IMPORTED)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.RandomState(0).rand(512, 8).astype("float32")
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).astype("int32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).with_options(options)


class FirstStep(tf.keras.callbacks.Callback):
    seen = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.seen:
            self.seen = True
            float((logs or {}).get("loss", 0.0))  # the step's result in hand: the step is done
            stamp("first_step", time.time())


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.2),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0, callbacks=[FirstStep()])
stamp("done", time.time())

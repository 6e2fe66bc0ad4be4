"""`fit` with tfdist's MetricsReporter in the job's mode: Keras 3 under Horovod (each rank's own loss
differs, so averaging shows), tf_keras under parameter servers. Prints each rank's own epoch losses.

    metrics_fit.py TENSORBOARD_DIR"""
import json
import sys

import numpy as np

import tfdist
from tfdist.callbacks import LearningRateWarmup, MetricsReporter

ctx = tfdist.init(default_hparams={"global_batch_size": 32})
import tensorflow as tf  # noqa: E402

keras = tf.keras  # Keras 3, or tf_keras in ps mode
rng = np.random.RandomState(ctx.rank)  # each rank its own data: different losses
x = rng.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int32")


class OwnLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))


own = OwnLosses()
batches = None if ctx.distribution == "ps" else 4  # tf_keras runs no batch-level callbacks under PSS
callbacks = [own, MetricsReporter(every_n_batches=batches, tensorboard_dir=sys.argv[1]),
             LearningRateWarmup(warmup_epochs=1, verbose=1)]  # 0.1 -> 0.1 x 2 slots
with ctx.strategy.scope():
    model = keras.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(8,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1)
    if ctx.distribution == "horovod":
        import tfdist.horovod as thvd

        optimizer = thvd.DistributedOptimizer(optimizer)
        callbacks.insert(0, thvd.BroadcastGlobalVariablesCallback(0))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
if ctx.distribution == "ps":
    data = keras.utils.experimental.DatasetCreator(
        lambda _: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(ctx.per_worker_batch_size))
    model.fit(data, epochs=3, steps_per_epoch=8, callbacks=callbacks, verbose=0)
else:
    model.fit(x, y, batch_size=ctx.per_worker_batch_size, epochs=3, validation_data=(x[:64], y[:64]),
              callbacks=callbacks, verbose=0)
print("OWN " + json.dumps({"rank": ctx.rank, "losses": own.losses}), flush=True)

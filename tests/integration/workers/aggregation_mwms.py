"""Keras 3 fit under MWMS with tfdist.aggregate_gradients (k from the config's
optimizations.aggregation_frequency). Writes $OUT/result-rankN.json: the optimizer's updates, how many
collective ops each compiled step holds and how often each ran, and the final weights."""
import json
import os

import numpy as np

import tfdist

ctx = tfdist.init()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdist import aggregation_mwms  # noqa: E402

rng = np.random.RandomState(0)
x = rng.rand(512, 8).astype("float32")
y = (x @ rng.rand(8, 1)).astype("float32")
batch = ctx.hparams["global_batch_size"]
# Repeated, with steps_per_epoch: the distributed iterator then needs no end-of-data agreement between
# workers (a finite dataset costs one small collective per step for that, with or without aggregation).
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).repeat()
with ctx.strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=tfdist.aggregate_gradients(keras.optimizers.SGD(0.1)), loss="mse")
model.set_weights([np.random.RandomState(i).uniform(-0.5, 0.5, w.shape).astype("float32")
                   for i, w in enumerate(model.get_weights())])
history = model.fit(dataset, epochs=2, steps_per_epoch=len(x) // batch, verbose=0)
result = {"updates": int(model.optimizer.iterations.numpy()), "loss": history.history["loss"],
          "weights": [w.tolist() for w in model.get_weights()]}
fn = model.train_function
if hasattr(fn, "update_fn"):
    result["collectives"] = {"accumulate": aggregation_mwms.collective_ops(fn.accumulate_fn),
                             "update": aggregation_mwms.collective_ops(fn.update_fn)}
with open(os.path.join(os.environ["OUT"], f"result-rank{ctx.rank}.json"), "w") as f:
    json.dump(result, f)

"""Keras 3 on the JAX backend across processes: keras.io's distribution guide ("Distributed training with
Keras 3": DataParallel, then ModelParallel with a LayoutMap), with the one line Keras asks of a
multi-process run, `keras.distribution.initialize()`, which reads what `tfdist launch` sets
(KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES, _PROCESS_ID). No tfdist import: the script runs as written
for Keras.

    tfdist launch --config examples/keras_jax/config.yaml          # 2 processes, DataParallel
    tfdist launch --config examples/keras_jax/config.yaml -- python examples/keras_jax/train.py --model-parallel

`--out DIR` writes each process's view of the trained weights (every shard, gathered) to DIR/rank<N>.npz.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model-parallel", action="store_true", help="shard the Dense layers over the processes")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--out", help="write this process's weights to OUT/rank<N>.npz")
args = parser.parse_args()

keras.distribution.initialize()  # joins the other processes (tfdist launch sets what it reads, even for one)
keras.utils.set_random_seed(1)

devices = keras.distribution.list_devices()  # every process's devices
if args.model_parallel:
    mesh = keras.distribution.DeviceMesh(shape=(1, len(devices)), axis_names=["data", "model"], devices=devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["d1/kernel"] = (None, "model")
    layout_map["d1/bias"] = ("model",)
    layout_map["d2.*kernel"] = ("model", None)
    distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data")
else:
    distribution = keras.distribution.DataParallel(devices=devices)
keras.distribution.set_distribution(distribution)

rng = np.random.default_rng(0)
inputs = rng.normal(size=(128, 28, 28, 1)).astype("float32")
labels = rng.normal(size=(128, 10)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(16)

x = layers.Input(shape=(28, 28, 1))
y = layers.Flatten()(x)
y = layers.Dense(units=200, use_bias=False, activation="relu", name="d1")(y)
y = layers.Dropout(0.4)(y)
y = layers.Dense(units=10, activation="softmax", name="d2")(y)
model = keras.Model(inputs=x, outputs=y)
model.compile(loss="mse")
history = model.fit(dataset, epochs=args.epochs, verbose=2)
print(f"distribution={type(distribution).__name__} devices={len(devices)} "
      f"loss={history.history['loss'][0]:.4f}->{history.history['loss'][-1]:.4f}", flush=True)

if args.out:
    import jax
    from jax.experimental import multihost_utils

    weights = {v.path.replace("/", "."): np.asarray(multihost_utils.process_allgather(v.value, tiled=True))
               for v in model.weights}
    np.savez(os.path.join(args.out, f"rank{jax.process_index()}.npz"), **weights)

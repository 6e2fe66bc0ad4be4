"""The workload of benchmarks/keras_jax_fit.py: a Keras 3 fit on the JAX backend, written as a user writes
it for one process or several (`keras.distribution.initialize()` where a launcher set its variables, DataParallel over every device), with no
TensorFlow and no tfdist import, so that the same file runs by hand and under `tfdist launch`.

A small convolutional net on synthetic 32x32x3 images: one fit of --warmup steps compiles the step, a
second fit of --steps steps is timed (a fit returns with its losses on the host: the device work is done).
Prints one line, `BENCH {...}`: examples and seconds of the timed fit, the backend, the devices JAX sees
and CUDA_VISIBLE_DEVICES as this process got it.
"""

import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--warmup", type=int, default=20)
parser.add_argument("--batch", type=int, default=256, help="global batch")
parser.add_argument("--width", type=int, default=64, help="channels of the first convolution")
args = parser.parse_args()

if os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES"):  # started by a launcher: join the other processes
    keras.distribution.initialize()  # (without the variables it raises: jax wants a coordinator address)
keras.utils.set_random_seed(1)
devices = keras.distribution.list_devices()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))

w = args.width
model = keras.Sequential([
    layers.Input(shape=(32, 32, 3)),
    layers.Conv2D(w, 3, padding="same", activation="relu"),
    layers.Conv2D(w, 3, padding="same", activation="relu"),
    layers.MaxPooling2D(),
    layers.Conv2D(2 * w, 3, padding="same", activation="relu"),
    layers.Conv2D(2 * w, 3, padding="same", activation="relu"),
    layers.MaxPooling2D(),
    layers.Conv2D(4 * w, 3, padding="same", activation="relu"),
    layers.GlobalAveragePooling2D(),
    layers.Dense(10),
])
model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(jax.process_index())
local_batch = args.batch // jax.process_count()  # each process feeds its share of the global batch
images = rng.normal(size=(local_batch * 8, 32, 32, 3)).astype("float32")
labels = rng.integers(0, 10, size=(local_batch * 8,)).astype("int32")


def batches():
    while True:
        for start in range(0, len(images), local_batch):
            yield images[start:start + local_batch], labels[start:start + local_batch]


model.fit(batches(), steps_per_epoch=args.warmup, epochs=1, shuffle=False, verbose=0)
started = time.perf_counter()
history = model.fit(batches(), steps_per_epoch=args.steps, epochs=1, shuffle=False, verbose=0)
seconds = time.perf_counter() - started
print("BENCH " + json.dumps({
    "examples": args.steps * args.batch, "seconds": seconds, "loss": float(history.history["loss"][-1]),
    "backend": jax.default_backend(), "processes": jax.process_count(), "process": jax.process_index(),
    "local_devices": [str(d) for d in jax.local_devices()], "devices": len(jax.devices()),
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)

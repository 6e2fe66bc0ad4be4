"""A plain Keras 3 `model.fit` script under MWMS, the kind a user writes, with bottlenecks to inject for
tests/multihost/test_diagnose.py (`tfdist diagnose` must name each one):

  --params N        parameters of a wide Dense layer: the gradients all-reduced each step (4 bytes each)
  --depth D         a 256-unit Dense layer applied D times (one set of weights): compute without parameters
  --device-seconds S  the forward pass waits S seconds, as a host waits for its GPU: an accelerator's compute
                    that takes none of this machine's CPU
  --batch B         the global batch (tfdist's global_batch_size hyperparameter unless the config sets one)
  --input-sleep S   seconds slept per batch inside the tf.data pipeline (a slow loader)
  --slow-rank R --slow-seconds S   rank R sleeps S seconds at the start of every training step (a straggler)
  --threads N       TensorFlow's intra- and inter-op threads (default: its own, one per core)

It trains for --steps steps (default: far more than anyone waits for; `tfdist diagnose` stops it) and prints
nothing per step. --report prints, at the end, one line `STEPS {"rank": R, "times": [...]}` with this rank's
per-step seconds (between consecutive batch ends), for calibrating the test's sizes by hand; --aggregate K
calls tfdist.aggregate_gradients(optimizer, K), what diagnose's no_communication variant does by itself.
"""

import argparse
import json
import time

import numpy as np

import tfdist

FEATURES = 256

parser = argparse.ArgumentParser()
parser.add_argument("--params", type=int, default=250_000)
parser.add_argument("--depth", type=int, default=8)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--device-seconds", type=float, default=0.0)
parser.add_argument("--input-sleep", type=float, default=0.0)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-seconds", type=float, default=0.0)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--steps", type=int, default=1_000_000)
parser.add_argument("--report", action="store_true")
parser.add_argument("--aggregate", type=int, default=1)
args = parser.parse_args()

import tensorflow as tf  # noqa: E402

if args.threads:  # before anything starts TensorFlow's runtime (tfdist.init's strategy does)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
ctx = tfdist.init(default_hparams={"global_batch_size": args.batch})

import keras  # noqa: E402
batch = ctx.effective_global_batch_size
rng = np.random.RandomState(0)
x = rng.rand(batch * 4, FEATURES).astype("float32")
y = (x[:, : FEATURES // 2].sum(1) > x[:, FEATURES // 2:].sum(1)).astype("int32")


def slow_loader(xb, yb):
    time.sleep(args.input_sleep)
    return xb, yb


def with_shapes(xb, yb):
    xb, yb = tf.py_function(slow_loader, [xb, yb], [tf.float32, tf.int32])
    xb.set_shape((None, FEATURES))
    yb.set_shape((None,))
    return xb, yb


options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)
if args.input_sleep > 0:
    ds = ds.map(with_shapes)
ds = ds.with_options(options)

class DeviceTime(keras.layers.Layer):
    """An accelerator's compute, emulated: the forward pass waits --device-seconds, as a host waits for its GPU,
    without taking this machine's CPU (which both hosts and the rest of the test suite share)."""

    def call(self, x):
        waited = tf.py_function(lambda: time.sleep(args.device_seconds) or 0.0, [], tf.float32)
        with tf.control_dependencies([waited]):
            return tf.identity(x)


with ctx.strategy.scope():
    inputs = keras.Input((FEATURES,))
    hidden = DeviceTime()(inputs) if args.device_seconds > 0 else inputs
    shared = keras.layers.Dense(FEATURES, activation="tanh")
    for _ in range(args.depth):
        hidden = shared(hidden)
    wide = keras.layers.Dense(max(1, args.params // FEATURES), activation="relu")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(2)(wide))
    optimizer = keras.optimizers.SGD(0.01)
    if args.aggregate > 1:
        optimizer = tfdist.aggregate_gradients(optimizer, args.aggregate)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class SlowRank(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        time.sleep(args.slow_seconds)


class StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


callbacks = [SlowRank()] if ctx.rank == args.slow_rank and args.slow_seconds > 0 else []
times = StepTimes()
model.fit(ds, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=callbacks + [times])
if args.report:
    steps = [round(b - a, 4) for a, b in zip(times.ends, times.ends[1:])]
    print("STEPS " + json.dumps({"rank": ctx.rank, "params": model.count_params(), "times": steps}), flush=True)

"""Parameter-server training with tf.keras `fit` (tf_keras under tfdist's ps mode). One script for every
task: tfdist.init() serves on worker and ps tasks; the chief trains and prints the optimizer's iterations.

Arguments: `keras3` builds the model with Keras 3 instead (must be refused); `kill-worker DIR` makes the
last worker SIGKILL itself once the chief finished epoch 0 (the chief waits for it, then trains on);
`chief-crash` checkpoints every epoch (tfdist.callbacks.Checkpoint) and the chief of the job's first run
exits with code 3 after epoch 1."""
import os
import signal
import sys
import threading
import time

import tfdist
from tfdist import envvars

EPOCHS, STEPS = 4, 10
mode = sys.argv[1] if len(sys.argv) > 1 else ""
marker_dir = sys.argv[2] if len(sys.argv) > 2 else ""
rank, size = int(os.environ[envvars.RANK]), int(os.environ[envvars.SIZE])
role = os.environ[envvars.ROLE]


def wait_for(path, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


if mode == "kill-worker" and role == "worker" and os.environ["TFDIST_LOCAL_RANK"] != "0" and rank == 2:
    def die():
        wait_for(os.path.join(marker_dir, "epoch0"))
        open(os.path.join(marker_dir, "dying"), "w").close()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()

ctx = tfdist.init(default_hparams={"global_batch_size": 32})  # workers and ps tasks never return
print(f"role={ctx.role} rank={ctx.rank} chief={ctx.is_chief} evaluator={ctx.is_evaluator} "
      f"per_worker={ctx.per_worker_batch_size} workers={ctx.num_slots}", flush=True)
if ctx.is_evaluator:
    sys.exit(0)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = __import__("keras") if mode == "keras3" else tf.keras
x = np.random.RandomState(0).rand(512, 8).astype("float32")
y = (x.sum(1) > 4).astype("int32")
per_worker = ctx.per_worker_batch_size


def dataset_fn(input_context):
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=input_context.input_pipeline_id) \
        .repeat().batch(per_worker)


with ctx.strategy.scope():
    model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class KillAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0 and mode == "kill-worker":
            open(os.path.join(marker_dir, "epoch0"), "w").close()
            wait_for(os.path.join(marker_dir, "dying"))
            print("a worker task was killed after epoch 0", flush=True)


class CrashAfterSecondEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1 and ctx.attempt == 0:
            os._exit(3)


callbacks = [KillAfterFirstEpoch()]
if mode == "chief-crash":
    from tfdist.callbacks import Checkpoint

    callbacks = [Checkpoint(), CrashAfterSecondEpoch()]  # the checkpoint of epoch 1 is written first
history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=EPOCHS, steps_per_epoch=STEPS,
                    callbacks=callbacks, verbose=0)
losses = history.history["loss"]
print(f"keras={type(model).__module__.split('.')[0]} strategy={type(ctx.strategy).__name__} "
      f"iterations={int(model.optimizer.iterations.numpy())} expected={EPOCHS * STEPS} "
      f"loss_fell={losses[-1] < losses[0]}", flush=True)

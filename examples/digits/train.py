"""Keras 3 image classifier on the UCI handwritten digits, trained with `model.fit`.

Runs unchanged as `python train.py` (one worker) or under
`tfdist launch --config config.yaml` (several). Target: test accuracy >= 0.93.
Reports loss and accuracy every 4 batches and at each epoch's end (with val_loss, val_accuracy) (`tfdist metrics ID --plot m.png`) and
writes TensorBoard event files (`tfdist tensorboard ID`).
"""

import argparse
import os
import sys
import tempfile

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64, "learning_rate": 0.003, "epochs": 12})

import keras  # noqa: E402  (after init: the strategy must exist before any TF work)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tfdist.callbacks import MetricsReporter  # noqa: E402

TARGET_ACCURACY = 0.93

parser = argparse.ArgumentParser()
parser.add_argument("--save", default=os.path.join(tempfile.gettempdir(), "tfdist-digits", "model.keras"))
args = parser.parse_args()


def datasets(batch_size: int):
    digits = np.loadtxt(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "digits.csv.gz"),
                        delimiter=",")  # the UCI digits, 8x8 pixels 0..16 and the label (examples/data/README.md)
    images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]  # (1797, 8, 8, 1)
    labels = digits[:, 64].astype("int32")
    order = np.random.RandomState(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    split = int(0.8 * len(labels))
    options = tf.data.Options()
    # In-memory data: every worker holds it all and keeps its share of the batches.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (tf.data.Dataset.from_tensor_slices((images[:split], labels[:split]))
             .shuffle(2048, seed=1).batch(batch_size, drop_remainder=True).with_options(options))
    test = tf.data.Dataset.from_tensor_slices((images[split:], labels[split:])).batch(batch_size).with_options(options)
    return train, test


train_ds, test_ds = datasets(ctx.effective_global_batch_size)
with ctx.strategy.scope():
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.Adam(ctx.hparams["learning_rate"]),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

# Keras's own progress bar on every rank: `tfdist launch` shows the chief's, live, in one line.
model.fit(train_ds, epochs=ctx.hparams["epochs"], validation_data=test_ds,
          callbacks=[MetricsReporter(every_n_batches=4, tensorboard=True)])  # every rank runs it; the chief reports
loss, accuracy = model.evaluate(test_ds, verbose=0)
if ctx.is_chief:  # kept by the coordinator: `tfdist job ID` shows it
    tfdist.report_metrics(int(model.optimizer.iterations.numpy()), test_loss=loss, test_accuracy=accuracy)
tfdist.save_model(model, args.save)
if ctx.is_chief:
    print(f"final test accuracy: {accuracy:.4f} (target {TARGET_ACCURACY}; {ctx.size} workers, "
          f"global batch {ctx.effective_global_batch_size}); model saved to {args.save}")
sys.exit(0 if accuracy >= TARGET_ACCURACY else 1)

"""A trial of a hyperparameter search on the UCI handwritten digits (Keras 3, `model.fit`).

Run the search: `tfdist launch --config examples/search/asha.yaml` (adaptive ASHA: 8 trials, the losers of each
rung paused at their checkpoint, the winners continuing). Each trial gets its values in `ctx.hparams` and trains
for the searcher's max_length (`ctx.searcher`); it reports val_loss at every epoch's end (MetricsReporter) and
saves through tfdist's Checkpoint callback, so a trial the searcher pauses stops at a step, saves, and, once
promoted, continues from there. Runs unchanged as `python train.py` (one trial with the defaults).
"""

import os
import sys

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64, "learning_rate": 0.003, "units": 64})

import keras  # noqa: E402  (after init: the strategy must exist before any TF work)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tfdist.callbacks import Checkpoint, MetricsReporter  # noqa: E402

keras.utils.set_random_seed(1)
length = ctx.searcher.get("max_length") or {"epochs": 6}
epochs = length["epochs"]  # the config's max_length is in epochs
digits = np.loadtxt(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "digits.csv.gz"),
                    delimiter=",")  # the UCI digits, 8x8 pixels 0..16 and the label (examples/data/README.md)
images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
labels = digits[:, 64].astype("int32")
order = np.random.RandomState(0).permutation(len(labels))
images, labels = images[order], labels[order]
split = int(0.8 * len(labels))
batch = ctx.effective_global_batch_size
steps_per_epoch = split // batch
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA

checkpoint = Checkpoint(save_freq="epoch")
# Exactly once across a pause: the run resumes at the checkpoint's step, so skip the batches already trained.
train = (tf.data.Dataset.from_tensor_slices((images[:split], labels[:split])).shuffle(2048, seed=1)
         .repeat().batch(batch, drop_remainder=True).skip(checkpoint.resume_step).with_options(options))
test = tf.data.Dataset.from_tensor_slices((images[split:], labels[split:])).batch(batch).with_options(options)
with ctx.strategy.scope():
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(ctx.hparams["units"], activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.Adam(ctx.hparams["learning_rate"]),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(train, epochs=epochs, steps_per_epoch=steps_per_epoch, validation_data=test, verbose=0,
          callbacks=[checkpoint, MetricsReporter()])
loss, accuracy = model.evaluate(test, verbose=0)
if ctx.is_chief:
    print(f"trial done: val_loss {loss:.4f}, accuracy {accuracy:.4f} ({ctx.hparams})")
sys.exit(0)

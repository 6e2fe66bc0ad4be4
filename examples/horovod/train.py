"""Keras 3 digits classifier under tfdist's Horovod mode: one process per slot, gradients averaged by
`tfdist.horovod.DistributedOptimizer`, the initial weights broadcast from rank 0, epoch metrics averaged.

    tfdist launch --config examples/horovod/config.yaml      # or --slots 2 --distribution horovod
Also runs as plain `python train.py` (one rank; needs Horovod installed: `make horovod`).
Target: test accuracy >= 0.93. Reports loss and accuracy averaged over the ranks every 4 batches and at each
epoch's end (`tfdist metrics ID --plot m.png`) and writes TensorBoard event files (`tfdist tensorboard ID`).
"""

import os
import sys

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64, "learning_rate": 0.003, "epochs": 12})

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tfdist.horovod as thvd  # noqa: E402
from tfdist.callbacks import MetricsReporter  # noqa: E402

TARGET_ACCURACY = 0.93

digits = np.loadtxt(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "digits.csv.gz"),
                    delimiter=",")  # the UCI digits, 8x8 pixels 0..16 and the label (examples/data/README.md)
images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
labels = digits[:, 64].astype("int32")
order = np.random.RandomState(0).permutation(len(labels))
images, labels = images[order], labels[order]
split = int(0.8 * len(labels))
mine = slice(ctx.rank, split, ctx.size)  # each rank trains on its own share; a batch per rank

model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10),
])
# Averaged gradients over `size` ranks: the usual Horovod rule scales the learning rate with them.
optimizer = thvd.DistributedOptimizer(keras.optimizers.Adam(ctx.hparams["learning_rate"] * ctx.size ** 0.5))
model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.fit(images[mine], labels[mine], batch_size=ctx.per_worker_batch_size, epochs=ctx.hparams["epochs"],
          verbose=2 if ctx.is_chief else 0,
          callbacks=[thvd.BroadcastGlobalVariablesCallback(0), thvd.MetricAverageCallback(),
                     # each rank's logs are its own shard's: averaged over the ranks before the chief reports
                     MetricsReporter(every_n_batches=4, average=True, tensorboard=True)])
loss, accuracy = model.evaluate(images[split:], labels[split:], verbose=0)
if ctx.is_chief:
    tfdist.report_metrics(int(model.optimizer.iterations.numpy()), test_loss=loss, test_accuracy=accuracy)
    print(f"final test accuracy: {accuracy:.4f} (target {TARGET_ACCURACY}; {ctx.size} Horovod ranks, "
          f"{ctx.per_worker_batch_size} examples per rank and step)")
sys.exit(0 if accuracy >= TARGET_ACCURACY else 1)

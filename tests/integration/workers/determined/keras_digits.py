"""Determined's Keras example, in this project's words: the strategy and context from TF_CONFIG
(DistributedContext.from_tf_config(), under `determined.launch.tensorflow`), the trial's hyperparameters and
checkpoint from get_cluster_info(), DeterminedCallback (checkpoints, metrics, preemption, continue_id) and
Determined's TensorBoard callback around a plain `model.fit`. The digits come from examples/data (no network).
HOLD_AFTER_EPOCH=N (the tests' hook): a first run waits after epoch N until it is preempted."""

import argparse
import logging
import os
import time

import numpy as np
import tensorflow as tf

import determined as det
import determined.keras

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, os.pardir,
                    "examples", "data", "digits.csv.gz")


def digits():
    table = np.loadtxt(DATA, delimiter=",")
    features = (table[:, :64] / 16.0).astype("float32")
    labels = tf.keras.utils.to_categorical(table[:, 64].astype("int32"), num_classes=10)
    split = int(0.8 * len(table))
    return (features[:split], labels[:split]), (features[split:], labels[split:])


class HoldUntilPreempted(tf.keras.callbacks.Callback):
    """Waits after epoch N of a first run until the job is asked to stop (so a test need not race it)."""

    def __init__(self, core_context, epoch):
        super().__init__()
        self._core, self._epoch = core_context, epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self._epoch:
            while not self._core.preempt.should_preempt(auto_ack=False):
                time.sleep(0.1)


def main(core_context, strategy, checkpoint, continue_id, hparams, epochs):
    (train_x, train_y), validation = digits()
    with strategy.scope():
        inputs = tf.keras.layers.Input(shape=(64,))
        hidden = tf.keras.layers.Dense(hparams["layer1_dense_size"], activation="relu")(inputs)
        outputs = tf.keras.layers.Dense(10, activation="softmax")(hidden)
        model = tf.keras.models.Model(inputs=inputs, outputs=outputs)
        model.compile(optimizer=tf.keras.optimizers.RMSprop(learning_rate=hparams["learning_rate"]),
                      loss=tf.keras.losses.categorical_crossentropy,
                      metrics=[tf.keras.metrics.categorical_accuracy])
    callbacks = [det.keras.DeterminedCallback(core_context, checkpoint=checkpoint, continue_id=continue_id,
                                              checkpoint_epochs=1),
                 det.keras.TensorBoard(core_context, update_freq="epoch", profile_batch=0)]
    hold = int(os.environ.get("HOLD_AFTER_EPOCH", "0"))
    if hold and checkpoint is None:
        callbacks.append(HoldUntilPreempted(core_context, hold))
    model.fit(x=train_x, y=train_y, batch_size=hparams["global_batch_size"], validation_data=validation,
              epochs=epochs, callbacks=callbacks, verbose=2)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    info = det.get_cluster_info()
    if info and info.task_type == "TRIAL":
        continue_id, checkpoint, hparams = info.trial.trial_id, info.latest_checkpoint, info.trial.hparams
    else:
        continue_id, checkpoint = "local-train-task", None
        hparams = {"learning_rate": 1e-3, "layer1_dense_size": 16, "global_batch_size": 32}
    distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, strategy, checkpoint, continue_id, hparams, args.epochs)

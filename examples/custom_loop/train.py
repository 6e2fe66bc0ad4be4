"""A Keras 3 model trained by a custom loop (`strategy.run`) on the UCI handwritten digits.

Each replica gets `ctx.per_replica_batch_size` samples a step; gradients
are all-reduced by the strategy. Prints the loss per epoch on the chief and reports it every
REPORT_EVERY steps (`tfdist metrics ID --plot m.png` draws the curve).

Fault tolerant when the config sets `checkpoint_storage`: it checkpoints every epoch, resumes from
the latest checkpoint after a restart (max_restarts) or `tfdist resume`, and on a preemption
(`tfdist preempt`, SIGTERM) every worker stops at the same step, saves and exits 0.
"""

import os
import sys

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64, "learning_rate": 0.003, "epochs": 8})

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

digits = np.loadtxt(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "digits.csv.gz"),
                    delimiter=",")  # the UCI digits, 8x8 pixels 0..16 and the label (examples/data/README.md)
images = (digits[:, :64] / 16.0).astype("float32")
labels = digits[:, 64].astype("int32")
steps_per_epoch = len(labels) // ctx.effective_global_batch_size
REPORT_EVERY = 4  # steps between metric reports: a curve of a few dozen points


def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    # Each worker reads its own shard and batches it per replica.
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    ds = ds.shuffle(2048, seed=1).repeat().batch(ctx.per_replica_batch_size, drop_remainder=True)
    return ds.skip(ctx.resume_step)  # the steps trained before the checkpoint this run resumes from


dist_ds = ctx.strategy.distribute_datasets_from_function(dataset_fn)

with ctx.strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    optimizer = keras.optimizers.Adam(ctx.hparams["learning_rate"])
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    model.build((None, 64))
    optimizer.build(model.trainable_variables)


@tf.function
def train_step(iterator):
    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_obj(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=ctx.effective_global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica = ctx.strategy.run(step, args=next(iterator))
    return ctx.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
saving = bool(ctx.cluster_info.checkpoint_dir)  # the config's checkpoint_storage
step = tfdist.restore_checkpoint(checkpoint) if saving else 0
iterator = iter(dist_ds)
losses = []
while step < ctx.hparams["epochs"] * steps_per_epoch:
    losses.append(float(train_step(iterator)))  # the loss over every replica's share of the step
    step += 1
    if ctx.is_chief and step % REPORT_EVERY == 0:
        tfdist.report_metrics(step, loss=float(np.mean(losses[-REPORT_EVERY:])))
    if step % steps_per_epoch == 0:
        if ctx.is_chief:
            print(f"epoch {step // steps_per_epoch}: loss {np.mean(losses):.4f}")
            tfdist.report_metrics(step, epoch_loss=float(np.mean(losses)), epoch=step // steps_per_epoch)
        losses = []
        if saving:
            tfdist.save_checkpoint(checkpoint, step)  # every worker calls it; the chief's copy is kept
    if ctx.should_preempt(step):  # the same answer on every worker, at the same step
        if saving:
            tfdist.save_checkpoint(checkpoint, step)
        sys.exit(0)

checksum = float(sum(np.abs(w).sum() for w in model.get_weights()))
print(f"rank {ctx.rank}: weight checksum {checksum:.6f}")

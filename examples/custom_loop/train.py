"""A Keras 3 model trained by a custom loop (`strategy.run`) on scikit-learn's digits.

Each replica gets `ctx.per_replica_batch_size` samples a step; gradients
are all-reduced by the strategy. Prints the loss per epoch on the chief.
"""

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 64, "learning_rate": 0.003, "epochs": 8})

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

digits = load_digits()
images = (digits.images / 16.0).reshape(-1, 64).astype("float32")
labels = digits.target.astype("int32")
steps_per_epoch = len(labels) // ctx.effective_global_batch_size


def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    # Each worker reads its own shard and batches it per replica.
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(2048, seed=1).repeat().batch(ctx.per_replica_batch_size, drop_remainder=True)


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


iterator = iter(dist_ds)
for epoch in range(ctx.hparams["epochs"]):
    losses = [float(train_step(iterator)) for _ in range(steps_per_epoch)]
    if ctx.is_chief:
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}")

checksum = float(sum(np.abs(w).sum() for w in model.get_weights()))
print(f"rank {ctx.rank}: weight checksum {checksum:.6f}")

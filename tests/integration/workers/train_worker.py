"""A tiny Keras 3 training script the integration tests launch (fit or custom loop).

Writes rank{R}.npz (final weights) and rank{R}.json (losses, context, save paths) into --out.
"""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["fit", "loop"], default="fit")
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--crash-rank", type=int, default=-1)
parser.add_argument("--hang-rank", type=int, default=-1)
args = parser.parse_args()

rank_env = int(os.environ.get("TFDIST_RANK", "0"))
if rank_env == args.hang_rank:
    print("hanging before init", flush=True)
    time.sleep(600)

import tfdist  # noqa: E402

ctx = tfdist.init(default_hparams={"global_batch_size": 16})

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

rng = np.random.RandomState(0)
x = rng.rand(512, 8).astype("float32")
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).astype("int32")
keras.utils.set_random_seed(ctx.rank + 1)  # different per rank: the strategy must sync the initial weights

with ctx.strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.2)

losses = []
if args.mode == "fit":
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(ctx.effective_global_batch_size).with_options(options)
    with ctx.strategy.scope():
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])

    class Crash(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if ctx.rank == args.crash_rank and batch == 1:
                print("rank crashing on purpose", flush=True)
                raise RuntimeError("boom in rank %d" % ctx.rank)

    history = model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=2, callbacks=[Crash()])
    losses = [float(v) for v in history.history["loss"]]
    evaluation = model.evaluate(ds, steps=2, verbose=0, return_dict=True)
else:
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    with ctx.strategy.scope():
        model.build((None, 8))
        optimizer.build(model.trainable_variables)

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(input_context.num_input_pipelines,
                                                              input_context.input_pipeline_id)
        return ds.repeat().batch(ctx.per_replica_batch_size, drop_remainder=True)

    iterator = iter(ctx.strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step(it):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb, training=True)),
                                                  global_batch_size=ctx.effective_global_batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return ctx.strategy.reduce("SUM", ctx.strategy.run(step, args=next(it)), axis=None)

    for epoch in range(args.epochs):
        epoch_losses = []
        for i in range(args.steps):
            if ctx.rank == args.crash_rank and epoch == 0 and i == 1:
                print("rank crashing on purpose", flush=True)
                sys.exit(13)
            epoch_losses.append(float(train_step(iterator)))
        losses.append(float(np.mean(epoch_losses)))
        print(f"epoch {epoch} loss {losses[-1]:.4f}", flush=True)
    evaluation = {}

with tfdist.worker_save_path(os.path.join(args.out, "model.keras")) as save_path:
    model.save(save_path)
    existed_during = os.path.exists(save_path)
np.savez(os.path.join(args.out, f"rank{ctx.rank}.npz"), *model.get_weights())
with open(os.path.join(args.out, f"rank{ctx.rank}.json"), "w") as f:
    json.dump({"losses": losses, "evaluation": evaluation, "size": ctx.size, "rank": ctx.rank,
               "replicas": ctx.strategy.num_replicas_in_sync, "per_replica": ctx.per_replica_batch_size,
               "save_path": save_path, "saved_during": existed_during,
               "save_path_exists_after": os.path.exists(save_path)}, f)
print(f"rank {ctx.rank} done", flush=True)

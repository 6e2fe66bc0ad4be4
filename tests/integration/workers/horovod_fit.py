"""Keras 3 `fit` under tfdist's Horovod mode through tfdist.horovod's adapters: gradients averaged by the
optimizer wrapper, the initial broadcast and metric averaging by callbacks. Prints a digest of the final
weights (identical on every rank when training is really synchronous) and the batch sizes."""
import hashlib

import numpy as np

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 24})

import keras  # noqa: E402
import tfdist.horovod as thvd  # noqa: E402

rng = np.random.RandomState(0)
x = rng.rand(384, 8).astype("float32")
y = (x.sum(1) > 4).astype("int32")
shard = slice(ctx.rank, None, ctx.size)  # each rank its own examples
keras.utils.set_random_seed(100 + ctx.rank)  # different initial weights: the broadcast must fix them
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=thvd.DistributedOptimizer(keras.optimizers.SGD(0.1 * ctx.size)),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(x[shard], y[shard], batch_size=ctx.per_worker_batch_size, epochs=3, shuffle=False, verbose=0,
                    callbacks=[thvd.BroadcastGlobalVariablesCallback(0), thvd.MetricAverageCallback()])
digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16]
losses = history.history["loss"]
print(f"rank={ctx.rank} size={ctx.size} per_worker={ctx.per_worker_batch_size} "
      f"iterations={int(model.optimizer.iterations.numpy())} loss_fell={losses[-1] < losses[0]} "
      f"final_loss={losses[-1]:.6f} weights={digest} compression={thvd.compression().__name__}", flush=True)

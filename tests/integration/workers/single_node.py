"""Keras 3 `fit` under the job's single-node strategy; prints the strategy, its replicas and the
optimizer's iterations (no MWMS, no TF_CONFIG)."""
import numpy as np

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 32})

import keras  # noqa: E402

keras.utils.set_random_seed(0)  # unseeded, the loss of 3 short epochs did not always fall (1 run in hundreds)
x = np.random.RandomState(0).rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int32")
with ctx.strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(x, y, batch_size=ctx.effective_global_batch_size, epochs=3, verbose=0)
print(f"strategy={type(ctx.strategy).__name__} replicas={ctx.strategy.num_replicas_in_sync} size={ctx.size} "
      f"per_replica={ctx.per_replica_batch_size} iterations={int(model.optimizer.iterations.numpy())} "
      f"loss_fell={history.history['loss'][-1] < history.history['loss'][0]}", flush=True)

"""Keras 3 fit under Horovod with gradients aggregated every k steps (optimizations.aggregation_frequency
in the config): prints the optimizer's updates and a digest of the final weights."""
import hashlib

import numpy as np

import tfdist

ctx = tfdist.init(default_hparams={"global_batch_size": 32})
import keras  # noqa: E402
import tfdist.horovod as thvd  # noqa: E402

x = np.random.RandomState(ctx.rank).rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int32")
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
optimizer = thvd.DistributedOptimizer(keras.optimizers.SGD(0.1))  # k from the config
model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=ctx.per_worker_batch_size, epochs=2, verbose=0, shuffle=False)
digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16]
print(f"rank={ctx.rank} updates={int(optimizer.iterations.numpy())} steps={int(optimizer._iterations.numpy())} "
      f"weights={digest}", flush=True)

"""A Horovod script as Horovod's own TF2 examples write it (tensorflow2_mnist.py): hvd.init(), the
distributed gradient tape, broadcast_variables after the first step, a Keras model. It never imports
tfdist and knows nothing of Keras 3; under `tfdist launch --distribution horovod` it must run as is."""
import hashlib

import numpy as np
import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
rng = np.random.RandomState(0)
x = rng.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).repeat().batch(16)

tf.random.set_seed(hvd.rank())  # different initial weights on each rank: the broadcast must fix them
model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
loss_fn = tf.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = tf.optimizers.SGD(0.05 * hvd.size())


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)  # Keras 2 style, as Horovod writes it
    return loss_value


for batch, (images, labels) in enumerate(dataset.take(30)):
    loss_value = training_step(images, labels, batch == 0)
digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16]
print(f"hvd rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} cross_rank={hvd.cross_rank()} "
      f"loss={float(loss_value):.4f} weights={digest}", flush=True)

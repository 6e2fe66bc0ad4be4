"""A Horovod Keras script as Horovod's `examples/tensorflow2/tensorflow2_keras_mnist.py` writes it, on fewer
steps: `horovod.tensorflow.keras`, MNIST from `tf.keras.datasets` (offline in tests:
workers/offline_mnist), `hvd.DistributedOptimizer(..., backward_passes_per_step=1,
average_aggregated_gradients=True)`, `compile(experimental_run_tf_function=False)`, Horovod's broadcast,
metric-average and warmup callbacks, a `.h5` checkpoint on rank 0. It never imports tfdist and knows nothing
of Keras 3. Each rank starts from its own weights and shuffles its own way: equal final weights mean the
broadcast and the gradient all-reduce both worked."""
import hashlib

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd

hvd.init()
(mnist_images, mnist_labels), _ = tf.keras.datasets.mnist.load_data(path="mnist-%d.npz" % hvd.rank())
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(mnist_labels, tf.int64)))
dataset = dataset.repeat().shuffle(10000, seed=hvd.rank()).batch(32)

tf.random.set_seed(hvd.rank())
mnist_model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(8, [3, 3], activation="relu"),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(10, activation="softmax"),
])
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)
opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)
mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=["accuracy"],
                    experimental_run_tf_function=False)
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
]
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.h5"))
history = mnist_model.fit(dataset, steps_per_epoch=16 // hvd.size(), callbacks=callbacks, epochs=3, verbose=0)

digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in mnist_model.get_weights())).hexdigest()[:16]
print(f"hvd rank={hvd.rank()} size={hvd.size()} loss={history.history['loss'][-1]:.6f} "
      f"lr={history.history['lr'][-1]:.4f} optimizer_variables={len(opt.variables())} weights={digest}", flush=True)

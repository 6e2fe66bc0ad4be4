"""TensorFlow's multi-worker Keras tutorial, as users have it: reads TF_CONFIG itself through
MultiWorkerMirroredStrategy, Keras 3 `fit`, and never imports tfdist."""
import json
import os

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
x = np.random.RandomState(0).rand(512, 8).astype("float32")
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).astype("int32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).with_options(options)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.2), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(dataset, epochs=3, steps_per_epoch=4, verbose=0)
print(f"task {task['index']} replicas {strategy.num_replicas_in_sync} loss {history.history['loss'][-1]:.4f} "
      f"iterations {int(model.optimizer.iterations.numpy())}", flush=True)

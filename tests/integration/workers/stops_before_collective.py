"""A training loop whose rank 1 stops before step 4's collective, in this script's own code (as a stuck
user function does), while the other ranks go on into the collective and wait there for it. Each mode's
usual loop: `fit` under MultiWorkerMirroredStrategy (its all-reduce inside the compiled step), an eager
`hvd.allreduce` under Horovod, `process_allgather` under JAX, `all_reduce` under torch.distributed (and a
DDP backward with `ddp` after it). The first argument names which."""

import os
import sys
import time

STOP_AT = 3  # the steps every rank finishes; rank 1 then stops before the next one's collective
RANK = int(os.environ["TFDIST_RANK"])


def stop_before_the_collective(step):
    print(f"rank {RANK} stops before step {step + 1}", flush=True)
    time.sleep(3600)


def keras_fit():
    import tfdist

    ctx = tfdist.init()
    import numpy as np
    import tensorflow as tf

    keras = tf.keras
    x = np.random.RandomState(0).rand(512, 4).astype("float32")
    y = (x.sum(1) > 2).astype("int32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).with_options(options)
    with ctx.strategy.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def batch_begin(batch, logs):
        if RANK == 1 and batch == STOP_AT:
            stop_before_the_collective(batch)

    model.fit(train, epochs=2, verbose=0, callbacks=[keras.callbacks.LambdaCallback(on_train_batch_begin=batch_begin)])


def horovod_loop():
    import horovod.tensorflow as hvd
    import tensorflow as tf

    import tfdist

    hvd.init()
    for step in range(50):
        if RANK == 1 and step == STOP_AT:
            stop_before_the_collective(step)
        hvd.allreduce(tf.constant([float(step)]), name=f"loss{step}")
        tfdist.report_progress(step + 1)


def jax_loop():
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import tfdist

    jax.distributed.initialize()
    for step in range(50):
        if RANK == 1 and step == STOP_AT:
            stop_before_the_collective(step)
        multihost_utils.process_allgather(jnp.array([step]))
        tfdist.report_progress(step + 1)


def torch_loop(ddp):
    import torch
    import torch.distributed as dist

    import tfdist

    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 1)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    for step in range(50):
        if RANK == 1 and step == STOP_AT:
            stop_before_the_collective(step)
        if ddp:
            model(torch.ones(2, 4)).sum().backward()  # DDP all-reduces the gradients here
        else:
            dist.all_reduce(torch.ones(1))
        tfdist.report_progress(step + 1)


def keras_fit_on_a_generator():
    """Rank 1's input pipeline (a Python generator, run by tf.data on a thread of its own) stops instead."""
    import tfdist

    ctx = tfdist.init()
    import numpy as np
    import tensorflow as tf

    keras = tf.keras

    def batches():
        for i in range(64):
            if RANK == 1 and i == STOP_AT + 2:  # tf.data prefetches: the step after STOP_AT waits for it
                stop_before_the_collective(i)
            yield np.full((16, 4), i, "float32"), np.zeros(16, "int32")

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    train = tf.data.Dataset.from_generator(batches, output_signature=(
        tf.TensorSpec((16, 4), tf.float32), tf.TensorSpec((16,), tf.int32))).with_options(options)
    with ctx.strategy.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(train, epochs=1, steps_per_epoch=60, verbose=0)


def horovod_on_a_generator():
    """An eager loop over tf.data whose rank 1 generator stops (the main thread waits in the iterator)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    import tfdist

    hvd.init()

    def numbers():
        for i in range(64):
            if RANK == 1 and i == STOP_AT:
                stop_before_the_collective(i)
            yield float(i)

    dataset = tf.data.Dataset.from_generator(numbers, output_signature=tf.TensorSpec((), tf.float32))
    for step, x in enumerate(dataset):
        hvd.allreduce(x, name=f"x{step}")
        tfdist.report_progress(step + 1)


def horovod_tape():
    """Horovod's own TF2 example's step: the all-reduce inside a tf.function (DistributedGradientTape)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    import tfdist

    hvd.init()
    w = tf.Variable([1.0, 2.0])

    @tf.function
    def training_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)
        tape = hvd.DistributedGradientTape(tape)
        w.assign_sub(0.01 * tape.gradient(loss, [w])[0])

    for step in range(50):
        if RANK == 1 and step == STOP_AT:
            stop_before_the_collective(step)
        training_step(tf.constant([1.0, 1.0]))
        tfdist.report_progress(step + 1)


def torch_loader():
    """Rank 1's Dataset (read by a DataLoader in the training process) stops in `__getitem__`."""
    import torch
    import torch.distributed as dist

    import tfdist

    dist.init_process_group("gloo")

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 200

        def __getitem__(self, i):
            if RANK == 1 and i == STOP_AT * 2:
                stop_before_the_collective(i // 2)
            return torch.ones(4)

    for step, batch in enumerate(torch.utils.data.DataLoader(Slow(), batch_size=2)):
        dist.all_reduce(batch.sum())
        tfdist.report_progress(step + 1)


LOOPS = {"mwms": keras_fit, "mwms_generator": keras_fit_on_a_generator, "horovod_tape": horovod_tape,
         "horovod_generator": horovod_on_a_generator,
         "torch_loader": torch_loader, "horovod": horovod_loop, "jax": jax_loop, "torch": lambda: torch_loop(False),
         "ddp": lambda: torch_loop(True)}

if __name__ == "__main__":
    LOOPS[sys.argv[1]]()

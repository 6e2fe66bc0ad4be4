"""The workload of benchmarks/modes.py: one small MLP in plain TensorFlow variables (no Keras, so every
mode runs it the same way, with any launcher), trained on synthetic data in MWMS, Horovod or
parameter-server mode. It reads only what launchers set (TF_CONFIG, HOROVOD_*), so tfdist and the
hand-written launchers run the very same file.

    python modes_worker.py MODE STEPS GLOBAL_BATCH

Rank 0 (the chief in ps mode) prints `BENCH {"examples": N, "seconds": S}` for the steps after the
warm-up: the same number of examples in every mode (ps: steps x workers closures of a worker's batch).
"""

import json
import os
import sys
import time

mode, steps, global_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WARMUP = 5
IN, HIDDEN, OUT = 256, 512, 10

if mode == "ps":
    cfg = json.loads(os.environ["TF_CONFIG"])
    role = cfg["task"]["type"]
    if role in ("worker", "ps"):
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=resolver.task_id,
                                      protocol="grpc", start=True)
        server.join()

import tensorflow as tf  # noqa: E402


def make_variables():
    init = tf.random_normal_initializer(stddev=0.05, seed=1)
    return [tf.Variable(init((IN, HIDDEN))), tf.Variable(tf.zeros(HIDDEN)),
            tf.Variable(init((HIDDEN, HIDDEN))), tf.Variable(tf.zeros(HIDDEN)),
            tf.Variable(init((HIDDEN, OUT))), tf.Variable(tf.zeros(OUT))]


def loss_of(variables, x, y, scale):
    w1, b1, w2, b2, w3, b3 = variables
    h = tf.nn.relu(x @ w1 + b1)
    h = tf.nn.relu(h @ w2 + b2)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(y, h @ w3 + b3)
    return tf.reduce_sum(losses) / scale


def batches(batch, seed):
    x = tf.random.stateless_normal((2048, IN), seed=(seed, 0))
    y = tf.random.stateless_uniform((2048,), seed=(seed, 1), maxval=OUT, dtype=tf.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)


def report(rank, examples, seconds):
    if rank == 0:
        print("BENCH " + json.dumps({"examples": examples, "seconds": seconds}), flush=True)


def timed(run_step, count):
    for _ in range(WARMUP):
        run_step()
    start = time.perf_counter()
    for _ in range(count):
        run_step()
    return time.perf_counter() - start


if mode == "mwms":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id or 0
    with strategy.scope():
        variables = make_variables()
    lr = 0.05
    per_replica = global_batch // strategy.num_replicas_in_sync
    iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: batches(per_replica,
                                                                                   ctx.input_pipeline_id)))

    @tf.function
    def step():
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(variables, x, y, global_batch)
            grads = tape.gradient(loss, variables)
            grads = tf.distribute.get_replica_context().all_reduce("SUM", grads)
            for v, g in zip(variables, grads):
                v.assign_sub(lr * g)
        strategy.run(replica_step, args=next(iterator))

    seconds = timed(step, steps)
    report(rank, steps * global_batch, seconds)

elif mode == "horovod":
    import horovod.tensorflow as hvd

    hvd.init()
    variables = make_variables()
    per_rank = global_batch // hvd.size()
    iterator = iter(batches(per_rank, hvd.rank()))
    lr = 0.05

    @tf.function
    def step():
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_of(variables, x, y, per_rank)
        tape = hvd.DistributedGradientTape(tape)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(lr * g)

    hvd.broadcast_variables(variables, root_rank=0)
    seconds = timed(step, steps)
    report(hvd.rank(), steps * global_batch, seconds)

elif mode == "ps":
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    per_worker = global_batch // workers
    with strategy.scope():
        variables = make_variables()
    lr = 0.05
    dataset = coordinator.create_per_worker_dataset(lambda: batches(per_worker, 0))
    per_worker_iterator = iter(dataset)

    @tf.function
    def worker_step(iterator):
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_of(variables, x, y, per_worker)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(lr * g)

    def step():  # one global batch's worth: a closure per worker
        for _ in range(workers):
            coordinator.schedule(worker_step, args=(per_worker_iterator,))

    for _ in range(WARMUP):
        step()
    coordinator.join()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    coordinator.join()
    report(0, steps * global_batch, time.perf_counter() - start)
    os._exit(0)  # the ClusterCoordinator's threads would wait for the servers
else:
    sys.exit(f"unknown mode {mode}")

"""Picks the tf.distribute strategy for a context. Imports TensorFlow."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import time

import tensorflow as tf

from tfdist.compat import keras_mwms, keras_ps, tf_keras_logs
from tfdist.compat.keras_horovod import import_horovod
from tfdist.context import DistributedContext
from tfdist.errors import LaunchEnvironmentError

log = logging.getLogger("tfdist")


SINGLE_NODE_MODES = ("mirrored", "central_storage", "one_device")


def make_strategy(ctx: DistributedContext) -> tf.distribute.Strategy:
    """The strategy of the context's mode, checked against the slots the job was launched with."""
    if ctx.distribution == "ps":
        return _parameter_server_strategy(ctx)
    if ctx.distribution == "horovod":
        return _horovod(ctx)
    strategy = _collective_strategy(ctx)
    check_replicas(ctx, strategy)
    return strategy


def _collective_strategy(ctx: DistributedContext) -> tf.distribute.Strategy:
    if ctx.distribution in SINGLE_NODE_MODES:
        return _single_node_strategy(ctx)
    if ctx.size > 1:
        if ctx.distribution != "mwms":
            raise LaunchEnvironmentError(f"distribution mode {ctx.distribution!r} is not supported by this tfdist")
        keras_mwms.apply()
        tf_keras_logs.apply()  # tf_keras's bar: the mean over workers, not their sum
        # Reads TF_CONFIG; blocks until every worker of the job has joined.
        return tf.distribute.MultiWorkerMirroredStrategy()
    if ctx.local_slots > 1:
        tf_keras_logs.apply()
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def _parameter_server_strategy(ctx: DistributedContext) -> tf.distribute.Strategy:
    """The chief's ParameterServerStrategy (it connects to every worker and ps task); the evaluator
    trains nothing and gets the default strategy."""
    if ctx.role == "evaluator":
        return tf.distribute.get_strategy()
    if ctx.role != "chief":
        raise LaunchEnvironmentError(f"rank {ctx.rank}: ps mode has no role {ctx.role!r}")
    if "keras" in sys.modules:  # imported before init(): refuse its variables now (else when it loads)
        keras_ps.apply()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.ParameterServerStrategy(resolver)


def serve_forever(ctx: DistributedContext, on_ready) -> None:
    """A ps mode worker or ps task: runs its TF server for the chief until stopped (SIGTERM)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    # TensorFlow's servers never return from join(); the chief's end is what stops this task.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    on_ready()
    log.info("rank %d serves as %s %d for the chief; it runs until the chief is done", ctx.rank, resolver.task_type,
             resolver.task_id)
    while server is not None:  # the reference keeps the server up
        time.sleep(3600)


def _horovod(ctx: DistributedContext) -> tf.distribute.Strategy:
    """Horovod needs no tf.distribute strategy: each process is one replica; gradients are averaged by
    tfdist.horovod's tape or optimizer. Returns the default strategy after `hvd.init()`."""
    hvd = import_horovod()
    hvd.init()
    if hvd.size() != ctx.size or hvd.rank() != ctx.rank:
        raise LaunchEnvironmentError(f"Horovod says rank {hvd.rank()} of {hvd.size()} but tfdist launched rank "
                                     f"{ctx.rank} of {ctx.size}; check HOROVOD_* variables set outside tfdist")
    return tf.distribute.get_strategy()


def local_devices(count: int) -> list[str]:
    """`count` devices for one process: its GPUs (CUDA_VISIBLE_DEVICES holds exactly the job's), or,
    on a CPU node, as many logical CPU devices. Must run before TensorFlow initializes its devices."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return [f"/gpu:{i}" for i in range(len(gpus))]
    if count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            raise LaunchEnvironmentError(
                f"cannot split the CPU into {count} devices: TensorFlow was already initialized. Call "
                "tfdist.init() before building models, datasets or tensors") from None
    return [f"/cpu:{i}" for i in range(count)]


def _single_node_strategy(ctx: DistributedContext) -> tf.distribute.Strategy:
    """One process drives every slot: mirrored, central_storage or one_device."""
    devices = local_devices(ctx.local_slots)
    if ctx.distribution == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    if ctx.distribution == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices, parameter_device="/cpu:0")
    return tf.distribute.MirroredStrategy(devices)


def check_replicas(ctx: DistributedContext, strategy: tf.distribute.Strategy) -> None:
    """The strategy must drive exactly the slots the job was launched with."""
    replicas = strategy.num_replicas_in_sync
    if replicas != ctx.num_slots:
        raise LaunchEnvironmentError(
            f"rank {ctx.rank}: the strategy has {replicas} replicas in sync but the job was launched with "
            f"{ctx.num_slots} slots. Check TF_CONFIG and the devices visible to this process "
            "(CUDA_VISIBLE_DEVICES), or launch with --slots matching them.")


EXIT_BARRIER_TIMEOUT_MS = 30_000


CHIEF_EXIT_GRACE_S = 0.5


def register_exit_barrier(is_chief: bool) -> None:
    """At exit, every worker waits for the others before leaving.

    Without it the chief (which hosts TF's coordination service) may exit
    first, and the other workers log heartbeat errors, or fail, on the way out.
    A worker leaving because it failed (an uncaught exception, sys.exit with a
    non-zero code) does not wait: the others are stuck without it anyway, and
    waiting only hid the failure from the launcher for the barrier's 30 s.
    """
    failed = _watch_for_failure()

    def wait_for_everyone():
        from tensorflow.python.eager import context as tf_context

        if failed:
            return
        try:
            tf_context.context().wait_at_barrier("tfdist_exit", EXIT_BARRIER_TIMEOUT_MS)
            if is_chief:  # let the others leave before the coordination service goes
                time.sleep(CHIEF_EXIT_GRACE_S)
        except Exception as e:  # a worker that already failed: the launcher reports it
            log.debug("exit barrier: %s", e)

    atexit.register(wait_for_everyone)


def _watch_for_failure() -> list:
    """A list that becomes non-empty when the process is on its way out because of a failure."""
    failed: list = []
    previous_hook, previous_exit = sys.excepthook, sys.exit

    def excepthook(kind, value, traceback):
        failed.append(kind)
        previous_hook(kind, value, traceback)

    def exit_(code=None):
        if code not in (None, 0):
            failed.append(code)
        previous_exit(code)

    sys.excepthook, sys.exit = excepthook, exit_
    return failed

"""The TensorFlow pieces the worker modes (tfdist/modes/) share: the strategy of a process on its own, its
devices, the check that a strategy drives the launched slots, and the exit barrier. Imports TensorFlow, so
only a mode's `make_strategy` or `join` (run by tfdist.init()) imports this module."""

from __future__ import annotations

import atexit
import logging
import time

import tensorflow as tf

from tfdist.compat import tf_keras_logs
from tfdist.errors import LaunchEnvironmentError
from tfdist.exit_watch import watch_for_failure
from tfdist.modes.base import Process

log = logging.getLogger("tfdist")


def one_process_strategy(ctx: Process) -> tf.distribute.Strategy:
    """A process that needs no other: MirroredStrategy over its slots, or the default strategy for one."""
    if ctx.local_slots > 1:
        tf_keras_logs.apply()  # tf_keras's bar: the mean over replicas, not their sum
        return tf.distribute.MirroredStrategy()
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


def check_replicas(ctx: Process, strategy: tf.distribute.Strategy) -> tf.distribute.Strategy:
    """The strategy must drive exactly the slots the job was launched with; returns it."""
    replicas = strategy.num_replicas_in_sync
    if replicas != ctx.num_slots:
        raise LaunchEnvironmentError(
            f"rank {ctx.rank}: the strategy has {replicas} replicas in sync but the job was launched with "
            f"{ctx.num_slots} slots. Check TF_CONFIG and the devices visible to this process "
            "(CUDA_VISIBLE_DEVICES), or launch with --slots matching them.")
    return strategy


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
    failed = watch_for_failure()

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

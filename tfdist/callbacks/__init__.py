"""Keras callbacks that connect training to tfdist, one per file. They subclass the Keras of the process
(`tf.keras`: Keras 3, or tf_keras in ps mode), so one import works in every mode.

    from tfdist.callbacks import MetricsReporter
    model.fit(..., callbacks=[MetricsReporter(every_n_batches=50)])
"""

from tfdist.callbacks.checkpoint import Checkpoint
from tfdist.callbacks.metrics_reporter import MetricsReporter
from tfdist.callbacks.step_watchdog import StepWatchdog
from tfdist.callbacks.warmup import LearningRateWarmup

__all__ = ["Checkpoint", "LearningRateWarmup", "MetricsReporter", "StepWatchdog"]

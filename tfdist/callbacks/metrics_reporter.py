"""MetricsReporter: sends training and validation metrics to the coordinator, where `tfdist job ID`
shows the latest and `tfdist metrics ID` the history (stored with the job in SQLite: a coordinator
restart loses none).

The chief reports. With `optimizations.average_training_metrics: true` in the config (or
`average=True`) every rank's values are averaged first (through ctx.allgather, so every rank must run
the callback, as MWMS and Horovod do; in ps mode only the chief trains and nothing is averaged).
Optionally also writes TensorBoard event files: `tensorboard=True` puts them where `tfdist tensorboard ID`
finds them (tfdist/event_files.py), `tensorboard_dir` anywhere.

Batch reports are bounded: at most MAX_BATCH_REPORTS_PER_SECOND when the chief reports alone (an epoch's
end is always reported); when averaging, every rank must take part in each report, so the batch count
alone decides (a clock would differ between ranks).
"""

from __future__ import annotations

import math
import os
import sys
import time

from tfdist import envvars
from tfdist.callbacks._base import Callback, batch_hooks_allowed, received
from tfdist.event_files import this_jobs_event_dir
from tfdist.metrics import report_metrics
from tfdist.modes import worker_mode
from tfdist.runtime import current

MAX_BATCH_REPORTS_PER_SECOND = 50  # a fast model reporting every batch stays a few rows a second


class MetricsReporter(Callback):
    """Args:
        every_n_batches: also report the training logs every this many batches (None: at epoch ends only).
        average: average over ranks before reporting; None takes the config's
            `optimizations.average_training_metrics`.
        tensorboard_dir: where the chief writes TensorBoard event files (None: none).
        tensorboard: True writes them where `tfdist tensorboard ID` serves them: next to the job's checkpoints
            (<checkpoint_storage>/<job id>/tensorboard), else <working dir>/tfdist-tensorboard/<job id>.
    """

    def __init__(self, every_n_batches: int | None = None, average: bool | None = None,
                 tensorboard_dir: str | None = None, tensorboard: bool = False):
        super().__init__()
        if every_n_batches is not None and (isinstance(every_n_batches, bool) or not isinstance(every_n_batches, int)
                                            or every_n_batches < 1):
            raise ValueError("`every_n_batches` must be a positive integer or None. "
                             + received("every_n_batches", every_n_batches))
        if every_n_batches is not None and not batch_hooks_allowed():
            raise ValueError("`every_n_batches` cannot be used in ps mode: tf_keras runs no batch-level callbacks "
                             "under ParameterServerStrategy; metrics are reported at each epoch's end. "
                             + received("every_n_batches", every_n_batches))
        if average is not None and not isinstance(average, bool):
            raise ValueError("`average` must be True, False or None. " + received("average", average))
        if tensorboard_dir is not None and (not isinstance(tensorboard_dir, str) or not tensorboard_dir):
            raise ValueError("`tensorboard_dir` must be a non-empty path or None. "
                             + received("tensorboard_dir", tensorboard_dir))
        if not isinstance(tensorboard, bool):
            raise ValueError("`tensorboard` must be True or False. " + received("tensorboard", tensorboard))
        self._served_by_tfdist = tensorboard and tensorboard_dir is None  # where `tfdist tensorboard` looks
        if self._served_by_tfdist:
            tensorboard_dir = this_jobs_event_dir()
        self.every_n_batches = every_n_batches
        self.average = average if average is not None else os.environ.get(envvars.AVERAGE_TRAINING_METRICS) == "1"
        self.tensorboard_dir = tensorboard_dir
        self._batches = 0
        self._step = 0
        self._writer = None
        self._last_batch_report = -math.inf

    def _implements_train_batch_hooks(self):  # Keras skips batch hooks nobody needs (and PSS forbids them)
        return self.every_n_batches is not None

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if not self.every_n_batches or self._batches % self.every_n_batches:
            return
        if not self.average:  # the chief alone: a clock may bound the rate
            now = time.monotonic()
            if now - self._last_batch_report < 1.0 / MAX_BATCH_REPORTS_PER_SECOND:
                return
            self._last_batch_report = now
        self._report(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._report(dict(logs or {}, epoch=epoch + 1))

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()

    def _report(self, logs) -> None:
        ctx = current()
        self._step = int(self.model.optimizer.iterations.numpy())  # the global step, in every mode
        values = {k: float(v) for k, v in (logs or {}).items() if _number(v)}
        if self.average and ctx.size > 1 and worker_mode(ctx.distribution).every_rank_runs_script:
            everyone = ctx.allgather(values)
            values = {k: sum(v[k] for v in everyone) / len(everyone) for k in values if all(k in v for v in everyone)}
        if not ctx.is_chief or not values:
            return
        report_metrics(self._step, **values)
        if self.tensorboard_dir:
            self._write_tensorboard(values)

    def _write_tensorboard(self, values: dict[str, float]) -> None:
        """Scalar events as TensorBoard's own `tf.summary.scalar` writes them, through TensorFlow's core
        `tf.summary.write` (tensorflow-cpu 2.21 no longer ships the tensorboard package `scalar` needs)."""
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.tensorboard_dir)
            job = os.environ.get(envvars.JOB_ID)
            print(f"tfdist: TensorBoard event files go to {self.tensorboard_dir}"
                  + (f" (`tfdist tensorboard {job}` serves them)" if job and self._served_by_tfdist else ""),
                  file=sys.stderr, flush=True)
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR)
        with self._writer.as_default(step=self._step):
            for name, value in values.items():
                tf.summary.write(name, tf.constant(value, tf.float32), metadata=metadata)


def _number(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False

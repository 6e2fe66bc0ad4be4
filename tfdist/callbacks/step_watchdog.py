"""StepWatchdog: feeds tfdist's step watchdog from `fit`. After every batch it reports the optimizer's
step (`tfdist.report_progress`); the coordinator names a rank that stops progressing for longer than
`watchdog.step_timeout` (config), has every rank print its Python stacks into the job's logs, and stops
the job, instead of the silent hang a stuck collective gives. In ps mode (no batch-level callbacks under
ParameterServerStrategy) it reports at each epoch's end: set the timeout above an epoch's length.
"""

from __future__ import annotations

from tfdist.callbacks._base import Callback, batch_hooks_allowed
from tfdist.progress import report_progress


class StepWatchdog(Callback):
    def __init__(self):
        super().__init__()
        self._per_batch = batch_hooks_allowed()
        self._batches = 0

    def _implements_train_batch_hooks(self):
        return self._per_batch

    def on_train_begin(self, logs=None):
        report_progress(0)

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        report_progress(self._batches)

    def on_epoch_end(self, epoch, logs=None):
        if not self._per_batch:
            report_progress(epoch + 1)

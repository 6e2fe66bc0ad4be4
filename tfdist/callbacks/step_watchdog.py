"""StepWatchdog: feeds tfdist's step watchdog from `fit`. Under tfdist every `fit` already reports by
itself (tfdist/compat/keras_progress.py adds these same hooks); the callback remains for scripts that
name it, and is not doubled. After every training batch it reports the process's batch count
(`tfdist.report_progress`), after every validation batch the same count again, and at the end of `fit` it
takes the rank out of the watch; the coordinator names a rank that stops progressing for longer than
`watchdog.step_timeout` (config), has every rank print its Python stacks into the job's logs, and stops
the job, instead of the silent hang a stuck collective gives. Its hooks read no logs, so they also run
under ParameterServerStrategy (the chief's batches as it schedules them).
"""

from __future__ import annotations

from tfdist.callbacks._base import Callback
from tfdist.compat.keras_progress import FitProgressHooks


class StepWatchdog(FitProgressHooks, Callback):
    pass

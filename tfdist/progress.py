"""Training progress for the step watchdog: `tfdist.report_progress(step)` after each step (the
`tfdist.callbacks.StepWatchdog` callback does it for `fit`). The agent reads the file at each heartbeat;
a rank that stops reporting for longer than the config's `watchdog.step_timeout` is named, every rank's
Python stacks are dumped to the job's logs, and the job is stopped. Without a launcher it does nothing.
"""

from __future__ import annotations

import os
import time

from tfdist import envvars

MIN_INTERVAL = 0.5  # seconds between writes: the watchdog counts in seconds, steps can be milliseconds

_last_write = 0.0


def report_progress(step: int) -> None:
    """Says this rank finished training step `step`. Cheap: at most one small file write per 0.5 s."""
    global _last_write
    path = os.environ.get(envvars.PROGRESS_FILE)
    now = time.monotonic()
    if not path or now - _last_write < MIN_INTERVAL:
        return
    _last_write = now
    with open(path, "w") as f:
        f.write(f"{int(step)}\n")

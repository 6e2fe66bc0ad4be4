"""Training progress for the step watchdog. Under tfdist, Keras `fit` reports by itself (a callback the
worker start-up adds to every `fit`: tfdist/compat/keras_progress.py); a custom loop calls
`tfdist.report_progress(step)` after each step. The agent reads the file at each heartbeat; a rank that
stops reporting for longer than the config's `watchdog.step_timeout` is named, every rank's Python stacks
are dumped to the job's logs, and the job is stopped. `left_training()` (at the end of `fit`) takes the
rank out of the watch until it reports again, so saving or evaluating after training is not a stall.
Without a launcher it does nothing.
"""

from __future__ import annotations

import os
import threading
import time

from tfdist import diagnose, envvars

MIN_INTERVAL = 0.5  # seconds between writes: the watchdog counts in seconds, steps can be milliseconds

_lock = threading.Lock()
_last_write = 0.0
_pending: tuple[int, float] | None = None  # (step, when reached) reported within MIN_INTERVAL of the last write
_flusher: threading.Thread | None = None
_wake = threading.Event()
_trained = 0  # training batches `fit` finished in this process (the step its automatic reports give)


def report_progress(step: int) -> None:
    """Says this rank finished training step `step`. Cheap: at most one small file write per 0.5 s; a step
    reported sooner is written by a background thread when the interval is up, so the last step a rank
    reached is what the watchdog sees (it names the rank behind the others) even if it then hangs, dated
    when it was reached (the file's mtime, which the agent reads as the step's age)."""
    timed = diagnose.step_reported(step)  # under `tfdist diagnose`: timed...
    _record(step)
    if timed:  # ...and once its steps are, this loop waits to be stopped (nothing after training runs)
        diagnose.hold_until_stopped()


def _record(step: int) -> None:
    global _last_write, _pending
    path = os.environ.get(envvars.PROGRESS_FILE)
    if not path:
        return
    with _lock:
        now = time.monotonic()
        if now - _last_write >= MIN_INTERVAL:
            _write(path, step)
            _last_write, _pending = now, None
            return
        _pending = (int(step), time.time())
        _start_flusher()
    _wake.set()


def left_training() -> None:
    """This rank is out of its training loop (`fit` returned): its progress file goes, and the watchdog
    stops watching it until it reports again."""
    global _pending
    path = os.environ.get(envvars.PROGRESS_FILE)
    if not path:
        return
    with _lock:
        _pending = None
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def train_batch_done() -> None:
    """A training batch of `fit` ended: report the process's running count."""
    global _trained
    _trained += 1
    diagnose.step_reported(_trained)  # Keras holds in its own hooks (compat/keras_diagnose.py)
    _record(_trained)


def still_alive() -> None:
    """A validation batch inside `fit` ended: the same step again (evaluating is not a stall)."""
    _record(_trained)


def _write(path: str, step: int, reached: float | None = None) -> None:
    try:
        with open(path, "w") as f:
            f.write(f"{int(step)}\n")
        if reached is not None:  # written late: dated when the step was reached
            os.utime(path, (reached, reached))
    except OSError:  # the run's directory is gone (it is ending): a report never breaks training
        pass


def _start_flusher() -> None:
    """Under the lock: the thread that writes a pending step once MIN_INTERVAL has passed."""
    global _flusher
    if _flusher is None or not _flusher.is_alive():
        _flusher = threading.Thread(target=_flush_loop, name="tfdist-progress", daemon=True)
        _flusher.start()


def _flush_loop() -> None:
    global _last_write, _pending
    while True:
        _wake.wait()
        _wake.clear()
        while True:
            with _lock:
                due = _last_write + MIN_INTERVAL - time.monotonic()
                if _pending is None:
                    break
                if due <= 0:
                    path = os.environ.get(envvars.PROGRESS_FILE)
                    if path:
                        _write(path, *_pending)
                    _last_write, _pending = time.monotonic(), None
                    break
            time.sleep(due)

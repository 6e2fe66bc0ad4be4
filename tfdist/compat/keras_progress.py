"""Keras `fit` under tfdist reports its step progress by itself, so the step watchdog can name a rank
stuck inside training with no change to the script.

tfdist's worker start-up (bootstrap/sitecustomize.py) calls `apply` on `keras` (Keras 3) and `tf_keras`
(tf.keras under TF_USE_LEGACY_KERAS=1, as in ps mode) once they are imported: their `Model.fit` then
appends a `FitProgress` callback to the script's callbacks. It covers MultiWorkerMirroredStrategy,
the ps-mode chief, Horovod and single-worker `fit` alike. Each training batch reports the process's
batch count; each validation batch reports the same count again (evaluating is not a stall); the end of
`fit` takes the rank out of the watch (saving afterwards is not a stall either). It touches no logs, so
it costs Keras 3 no asynchronous dispatch and tf_keras no conversion of the logs to numpy, and it is
allowed under ParameterServerStrategy. A script that already passes `tfdist.callbacks.StepWatchdog` (the
same hooks) gets no second one.
"""

from __future__ import annotations

import functools

from tfdist import progress
from tfdist.compat import keras_diagnose

CALLBACKS_ARG = 5  # fit(x, y, batch_size, epochs, verbose, callbacks, ...): Keras 3 and tf_keras alike


class FitProgressHooks:
    """The hooks, mixed into a Keras Callback class (the one of the Keras that runs `fit`)."""

    tfdist_reports_progress = True  # a script's own StepWatchdog has these hooks: no second one
    async_safe = True  # Keras 3: these hooks read no logs, they may run off the training thread

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if keras_diagnose.timing_steps():  # under `tfdist diagnose`: each batch's end is timed where it happens
            self.async_safe = False
        self._supports_tf_logs = True  # tf_keras: logs as they are (no numpy sync; RemoteValues under PS)

    def on_train_begin(self, logs=None):
        progress.still_alive()

    def on_train_batch_end(self, batch, logs=None):
        progress.train_batch_done()
        if keras_diagnose.wants_model():  # under `tfdist diagnose`, once: what the record says of the model. Only
            keras_diagnose.fit_batch_done(self.model)  # then: under JAX, reading `self.model` syncs its state

    def on_test_batch_end(self, batch, logs=None):
        progress.still_alive()

    def on_train_end(self, logs=None):
        progress.left_training()


def apply(model_class, callback_base) -> bool:
    """Makes `model_class.fit` add a FitProgress callback (once; True if it is in place)."""
    upstream = model_class.fit
    if getattr(upstream, "_tfdist_progress", False):
        return True
    callback_class = type("FitProgress", (FitProgressHooks, callback_base),
                          {"__doc__": "tfdist: reports fit's step progress to the step watchdog."})
    hold_class = type("DiagnoseHold", (keras_diagnose.HoldHooks, callback_base),
                      {"__doc__": "tfdist diagnose: a rank whose steps are timed waits here to be stopped."})

    @functools.wraps(upstream)
    def fit(self, *args, **kwargs):
        args, kwargs = keras_diagnose.prepare_fit(self, args, kwargs)  # under `tfdist diagnose`: the variant's change
        if len(args) > CALLBACKS_ARG:
            callbacks = keras_diagnose.with_hold(with_progress(args[CALLBACKS_ARG], callback_class), hold_class)
            args = (*args[:CALLBACKS_ARG], callbacks, *args[CALLBACKS_ARG + 1:])
        else:
            kwargs["callbacks"] = keras_diagnose.with_hold(with_progress(kwargs.get("callbacks"), callback_class),
                                                           hold_class)
        history = upstream(self, *args, **kwargs)
        keras_diagnose.after_fit()
        return history

    fit._tfdist_progress = True
    model_class.fit = fit
    return True


def with_progress(callbacks, callback_class):
    """The script's callbacks and a FitProgress after them (last: a script's callback that hangs is named
    before its batch is counted). Left as they are when they already report, or are not a list (a
    CallbackList the script built itself)."""
    if callbacks is None:
        return [callback_class()]
    if not isinstance(callbacks, (list, tuple)):
        return callbacks
    if any(getattr(c, "tfdist_reports_progress", False) for c in callbacks):
        return callbacks
    return [*callbacks, callback_class()]


def apply_module(module) -> bool:
    """For `keras` (Keras 3) or `tf_keras`, once imported: their Model and Callback."""
    return apply(module.Model, module.callbacks.Callback)

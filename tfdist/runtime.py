"""The worker's process-wide runtime: `tfdist.init()` joins the job once (the strategy, the exit barrier,
the launcher's ready signal) and `tfdist.current()` returns the context it made.

The context values themselves are tfdist/context.py, and what joining means in each mode is the mode's
(tfdist/modes/); this module only holds the one context per process. Importing it is cheap: TensorFlow is
imported by `init()`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Mapping

from tfdist.compat import rendezvous
from tfdist.context import DistributedContext, context_from_env
from tfdist.modes import worker_mode

log = logging.getLogger("tfdist")

_current: DistributedContext | None = None  # what init() returned; None until it ran


def init(default_hparams: Mapping[str, Any] | None = None) -> DistributedContext:
    """Joins the job: reads the launcher's environment and creates the strategy.

    Call it once, before building models or datasets. In ps mode, on worker and ps tasks it serves
    the chief and never returns; the chief gets a ParameterServerStrategy, the evaluator a context
    whose `is_evaluator` is true. In horovod mode it runs `hvd.init()`. `default_hparams` are
    used where the config does not set a hyperparameter, so the same script
    also runs as plain `python train.py`.
    """
    global _current
    if _current is not None:
        return _current
    _setup_logging()
    ctx = context_from_env(os.environ, default_hparams)
    warning = ctx.batch_remainder_warning
    if warning and ctx.is_chief:
        log.warning(warning)
    # The mode imports TensorFlow (its framework) here: only init() may. A ps worker or ps task never returns.
    strategy = worker_mode(ctx.distribution).join(ctx, _signal_ready)
    ctx = dataclasses.replace(ctx, strategy=strategy)
    _signal_ready()
    _current = ctx
    return ctx


def current() -> DistributedContext:
    """The context `init()` returned; calls `init()` if it has not run yet."""
    return _current if _current is not None else init()


def current_or_env() -> DistributedContext:
    """The context `init()` returned, else one read from the environment (no strategy: nothing is
    created, so helpers that only need ranks and paths never start TensorFlow)."""
    return _current if _current is not None else context_from_env(os.environ)


def _signal_ready() -> None:
    """Tells the launcher this worker joined, so its startup timeout stops."""
    rendezvous.signal_ready()


def _setup_logging() -> None:
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("tfdist %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)

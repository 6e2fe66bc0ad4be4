"""LearningRateWarmup: the large-batch warmup of Goyal et al. (2017), "Accurate, Large Minibatch SGD".

With weak scaling the global batch grows with the slots (each replica keeps its batch), and the
learning rate should grow with it: lr x slots. Starting there diverges early in training; ramping
linearly from lr to lr x slots over the first k epochs (or steps) does not. The callback sets the
optimizer's learning rate before every batch of the warmup, then leaves it at the target.
"""

from __future__ import annotations

from tfdist.callbacks._base import Callback, batch_hooks_allowed, received, sync_jax_state
from tfdist.runtime import current


STEPS_OF_RAMP = 100


class LearningRateWarmup(Callback):
    """The rate rises in at most 100 stairs (every step for warmups of up to 100 steps).

    Args:
        warmup_epochs: ramp over this many epochs (needs the epoch's step count: `steps_per_epoch` or a
            sized dataset), or
        warmup_steps: ramp over this many optimizer steps (exactly one of the two).
        multiplier: the target is the starting rate times this; default the job's slots (replicas).
        verbose: 1 prints the rate at the start and the end of the warmup (chief only).
    """

    def __init__(self, warmup_epochs: int | None = None, warmup_steps: int | None = None,
                 multiplier: float | None = None, verbose: int = 0):
        super().__init__()
        if (warmup_epochs is None) == (warmup_steps is None):
            raise ValueError("Give exactly one of `warmup_epochs` and `warmup_steps`. "
                             f"Received: warmup_epochs={warmup_epochs!r}, warmup_steps={warmup_steps!r}")
        for name, value in (("warmup_epochs", warmup_epochs), ("warmup_steps", warmup_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"`{name}` must be a positive integer. " + received(name, value))
        if warmup_steps is not None and not batch_hooks_allowed():
            raise ValueError("`warmup_steps` cannot be used in ps mode: tf_keras runs no batch-level callbacks "
                             "under ParameterServerStrategy; use `warmup_epochs` (the rate then rises once per "
                             "epoch). " + received("warmup_steps", warmup_steps))
        if multiplier is not None and (isinstance(multiplier, bool) or not isinstance(multiplier, (int, float))
                                       or multiplier <= 0):
            raise ValueError("`multiplier` must be a positive number. " + received("multiplier", multiplier))
        self.warmup_epochs, self.warmup_steps = warmup_epochs, warmup_steps
        self.multiplier, self.verbose = multiplier, verbose
        self._per_batch = batch_hooks_allowed()
        self._initial = self._target = self._assigned = self._rate = None
        self._total = 0
        self._step = 0

    def _implements_train_batch_hooks(self):  # per batch, except under PSS (epochs only)
        return self._per_batch

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        rate = optimizer.learning_rate
        configured = getattr(optimizer, "_learning_rate", rate)  # a schedule shows here, not in learning_rate
        if not hasattr(rate, "assign") or not hasattr(configured, "assign"):
            raise ValueError("LearningRateWarmup sets the optimizer's learning rate, but it is a schedule "
                             f"({type(configured).__name__}); give the optimizer a number, or build the warmup "
                             "into your schedule")
        self._rate = configured  # the variable itself: cheaper to assign than through the property
        self._initial = float(rate.numpy())
        self._target = self._initial * (self.multiplier if self.multiplier is not None else current().num_slots)
        steps_per_epoch = self.params.get("steps") if self.params else None
        if self.warmup_steps is not None:
            self._total = self.warmup_steps
        elif self._per_batch:
            if not steps_per_epoch:
                raise ValueError("`warmup_epochs` needs the number of steps per epoch: pass `steps_per_epoch` to "
                                 "fit (or a dataset of known size), or use `warmup_steps`")
            self._total = self.warmup_epochs * steps_per_epoch
        else:
            self._total = self.warmup_epochs
        self._log(f"learning-rate warmup from {self._initial:g} to {self._target:g} over {self._total} "
                  f"{'steps' if self._per_batch else 'epochs'}")

    def on_train_batch_begin(self, batch, logs=None):
        if self._per_batch:
            self._set(self._step)
            self._step += 1

    def on_epoch_begin(self, epoch, logs=None):
        if not self._per_batch:
            self._set(epoch)

    def _set(self, done: int) -> None:
        """At most STEPS_OF_RAMP assignments over the warmup: an assignment is an eager op (a fraction of a
        millisecond), and a ramp of 100 stairs is as gradual as a per-step one."""
        if done > self._total:
            return
        value = self._initial + (self._target - self._initial) * min(1.0, done / self._total)
        stair = abs(self._target - self._initial) / STEPS_OF_RAMP
        if self._assigned is not None and (value == self._assigned or
                                           (done < self._total and abs(value - self._assigned) < stair)):
            return
        sync_jax_state(self.model)  # else Keras-on-JAX trains on with the old rate and later overwrites this one
        self._rate.assign(value)
        self._assigned = value
        if done == self._total:
            self._log(f"learning-rate warmup done: {self._target:g}")

    def _log(self, message: str) -> None:
        if self.verbose and current().is_chief:
            print(f"tfdist: {message}", flush=True)

"""Checkpoint: fault-tolerant `fit`. Saves the model and optimizer every `save_freq` steps (or epochs)
under the job's checkpoint_storage, recorded with the job; on a restart (max_restarts) or a resume
(after `tfdist preempt`) it restores the latest one before the first step and says so in the logs;
and it stops every rank at the same step when the job is preempted (save, then exit 0).

Exactly once: the run resumes at the checkpoint's step S and trains until epochs x steps_per_epoch
steps in all, so give `fit` a repeated dataset with `steps_per_epoch` and skip the batches already
trained: `dataset.repeat().skip(checkpoint.resume_step)` (in global batches, before distributing;
the same as `ctx.resume_step` under `tfdist launch`). Epochs
after a mid-epoch resume end S mod steps_per_epoch steps later than they would have.

Under Keras 3 on JAX (the jax mode) the model's and optimizer's variables are saved as arrays
(tfdist/keras_state.py) instead of a tf.train.Checkpoint.

In ps mode tf_keras runs no batch-level callbacks: save_freq must be "epoch", and a preemption
stops at an epoch's end.
"""

from __future__ import annotations

import sys

from tfdist import checkpointing, preemption
from tfdist.callbacks._base import Callback, batch_hooks_allowed, received, sync_jax_state


class Checkpoint(Callback):
    def __init__(self, save_freq="epoch", max_to_keep: int = 3, directory: str | None = None):
        """save_freq: "epoch", or every this many steps (batches). max_to_keep: newest checkpoints kept (0:
        all). directory: where to write when not launched by tfdist (else the job's checkpoint_storage)."""
        super().__init__()
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"save_freq must be 'epoch' or a positive number of steps. {received('save_freq', save_freq)}")
        if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 0:
            raise ValueError(f"max_to_keep must be an integer >= 0 (0 keeps all). {received('max_to_keep', max_to_keep)}")
        self._per_batch = batch_hooks_allowed()
        if save_freq != "epoch" and not self._per_batch:
            raise ValueError("in ps mode tf_keras runs no batch-level callbacks, so checkpoints are saved per epoch: "
                             f"use save_freq='epoch'. {received('save_freq', save_freq)}")
        self.save_freq, self.max_to_keep = save_freq, max_to_keep
        self.directory = checkpointing.checkpoint_dir(directory)  # fails here, not after an epoch, when unset
        found = checkpointing.latest(override=self.directory)
        self.resume_step = found.step if found else 0  # skip this many global batches of a repeated dataset
        self._checkpoint = None
        self._step = 0  # global steps trained, counting those before the restored checkpoint
        self._saved_at = -1
        self._last_step: int | None = None

    def _implements_train_batch_hooks(self):
        return self._per_batch

    def on_train_begin(self, logs=None):
        from tfdist.keras_state import checkpoint_of

        optimizer = self.model.optimizer
        if hasattr(optimizer, "built") and not optimizer.built:  # Keras 3 without a strategy builds lazily
            optimizer.build(self.model.trainable_variables)
        self._checkpoint = checkpoint_of(self.model, optimizer)  # tf.train.Checkpoint, or the variables on JAX
        self._step = self._saved_at = checkpointing.restore_checkpoint(self._checkpoint, directory=self.directory)
        epochs, steps = self.params.get("epochs"), self.params.get("steps")
        if steps and epochs:
            self._last_step = epochs * steps
            if self._step and hasattr(self.model, "_training_state"):  # tf_keras: its own resume hook
                self.model._training_state = _ResumeAt(self._step // steps, self._step % steps)
            elif self._step:
                self.model._initial_epoch = min(self._step // steps, epochs)

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self.save_freq != "epoch" and self._step % self.save_freq == 0:
            self._save()
        if preemption.stop_here(self._step):
            self._stop_for_preemption()
        if self._last_step is not None and self._step >= self._last_step:
            self.model.stop_training = True  # a mid-epoch resume: the last epoch ends at the planned step

    def on_epoch_end(self, epoch, logs=None):
        if not self._per_batch:
            self._step = (epoch + 1) * (self.params.get("steps") or 1)
        if self.save_freq == "epoch":
            self._save()
        if not self._per_batch and preemption.stop_here(self._step):
            self._stop_for_preemption()

    def on_train_end(self, logs=None):
        preemption.current().disarm()
        if isinstance(getattr(self.model, "_training_state", None), _ResumeAt):
            self.model._training_state = None

    def _save(self) -> None:
        if self._saved_at != self._step:
            sync_jax_state(self.model)  # a mid-epoch save holds this step's values under Keras-on-JAX
            checkpointing.save_checkpoint(self._checkpoint, self._step, directory=self.directory,
                                          max_to_keep=self.max_to_keep)
            self._saved_at = self._step

    def _stop_for_preemption(self) -> None:
        self._save()
        print(f"tfdist: preempted: saved at step {self._step}; exiting", file=sys.stderr, flush=True)
        raise SystemExit(0)


class _ResumeAt:
    """tf_keras's `fit` asks `model._training_state` (its BackupAndRestore hook) where to start: here."""

    def __init__(self, epoch: int, step: int):
        self.epoch, self.step = epoch, step

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        return self.epoch, self.step

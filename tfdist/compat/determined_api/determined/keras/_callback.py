"""`det.keras.DeterminedCallback`: Determined's Keras callback on tfdist. It reports training metrics (per epoch,
or every N batches) and each validation's, saves a checkpoint every `checkpoint_epochs` epochs and at the end of
training or a preemption, checks for preemption at each epoch's end, and on a restart or resume loads the
checkpoint it is given: the epoch it left off at when `continue_id` matches (a pause), only the weights when not
(a warm start). Its state is JSON beside the weights (Determined pickles it: tfdist unpickles nothing it did not
make in the same process)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Dict, Optional, Union

import tensorflow as tf

from tfdist.progress import left_training

WEIGHTS = "model_checkpoint"
STATE = "callback_state.json"


def _keras3() -> bool:
    """tf.keras is Keras 3, not tf_keras (TF_USE_LEGACY_KERAS=1, which Determined's Keras examples were written for)."""
    return not tf.keras.callbacks.Callback.__module__.startswith("tf_keras")


class DeterminedCallback(tf.keras.callbacks.Callback):
    def __init__(self, core_context, checkpoint: Optional[str], continue_id: Union[int, str], *,
                 train_metrics_report_period: Union[int, str] = "epoch", checkpoint_epochs: int = 1) -> None:
        super().__init__()
        if train_metrics_report_period != "epoch" and (isinstance(train_metrics_report_period, bool) or
                                                       not isinstance(train_metrics_report_period, int) or
                                                       train_metrics_report_period < 1):
            raise ValueError(f"train_metrics_report_period: 'epoch' or a number of batches, got "
                             f"{train_metrics_report_period!r}")
        self._core = core_context
        self._checkpoint = checkpoint
        self._continue_id = continue_id
        self._report_period = train_metrics_report_period
        self._checkpoint_epochs = int(checkpoint_epochs)
        self._is_chief = core_context.distributed.rank == 0
        self._steps_completed = 0
        self._epoch = -1
        self._last_train_epoch = -1
        self._last_ckpt_epoch = -1

    # ------------------------------------------------------------ Keras's hooks
    def on_train_begin(self, logs=None) -> None:
        if self._checkpoint is not None:
            self._load(self._checkpoint)

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        self._steps_completed += 1
        if self._is_chief and isinstance(self._report_period, int) and \
                self._steps_completed % self._report_period == 0:
            self._report("training", logs or {})

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if self._is_chief and self._report_period == "epoch":
            self._report("training", {k: v for k, v in (logs or {}).items() if not k.startswith("val_")},
                         epochs=epoch + 1)
        if self._is_chief and self.params.get("epochs"):
            self._core.train.report_progress(min(1.0, (epoch + 1) / self.params["epochs"]))
        self._last_train_epoch = epoch
        if self._checkpoint_epochs > 0 and (epoch + 1) % self._checkpoint_epochs == 0:
            self._save(epoch)
        if self._core.preempt.should_preempt():
            self.model.stop_training = True

    def on_test_end(self, logs=None) -> None:
        if self._is_chief and logs:
            self._report("validation", logs)

    def on_train_end(self, logs=None) -> None:
        if self._last_train_epoch > self._last_ckpt_epoch:
            self._save(self._last_train_epoch)
        left_training()

    # ------------------------------------------------------------ saving and loading (subclasses may override)
    def save_model(self, model, path: str, distributed) -> None:
        """Every worker saves (MultiWorkerMirroredStrategy's saves are collectives); only the chief's is kept."""
        target = path + ".weights.h5" if _keras3() else path
        if distributed.rank == 0:
            model.save_weights(target)
            return
        scratch = tempfile.mkdtemp(prefix="tfdist-det-worker-weights-")
        try:
            model.save_weights(os.path.join(scratch, os.path.basename(target)))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def load_model(self, model, path: str, distributed) -> None:
        model.load_weights(path + ".weights.h5" if os.path.exists(path + ".weights.h5") else path)

    # ------------------------------------------------------------ internals
    def _report(self, group: str, logs: Dict[str, Any], epochs: Optional[int] = None) -> None:
        metrics = {k: v for k, v in logs.items() if k not in ("batch", "size")}
        metrics.setdefault("epochs", epochs if epochs is not None else self._epoch + 1)
        metrics.setdefault("batches", self._steps_completed)
        self._core.train.report_metrics(group, self._steps_completed, metrics)

    def _save(self, epoch: int) -> None:
        metadata = {"steps_completed": self._steps_completed}
        with self._core.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
            self.save_model(self.model, str(path / WEIGHTS), self._core.distributed)
            if self._is_chief:
                state = {"epoch": epoch, "steps_completed": self._steps_completed, "continue_id": self._continue_id}
                with open(path / STATE, "w", encoding="utf-8") as f:
                    json.dump(state, f, default=str)
        self._last_ckpt_epoch = epoch

    def _load(self, storage_id: str) -> None:
        with self._core.checkpoint.restore_path(storage_id) as path:
            self.load_model(self.model, str(path / WEIGHTS), self._core.distributed)
            try:
                with open(path / STATE, encoding="utf-8") as f:
                    state = json.load(f)
            except FileNotFoundError:
                return
        if str(state.get("continue_id")) != str(self._continue_id):
            return  # a warm start: the weights only, training from epoch 0
        self._steps_completed = int(state["steps_completed"])
        initial_epoch = int(state["epoch"]) + 1
        self._last_train_epoch = self._last_ckpt_epoch = initial_epoch - 1
        if hasattr(self.model, "_training_state") and not _keras3():  # tf_keras: its BackupAndRestore hook
            self.model._training_state = _StartAt(initial_epoch)
        else:
            self.model._initial_epoch = initial_epoch
        print(f"tfdist: DeterminedCallback resumed from checkpoint {storage_id} after epoch {initial_epoch}",
              flush=True)


class _StartAt:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def maybe_load_initial_epoch_from_ckpt(self, *_: Any, **__: Any) -> int:
        return self.epoch

    def maybe_load_initial_counters_from_ckpt(self, *_: Any, **__: Any):
        return self.epoch, 0


class TensorBoard(tf.keras.callbacks.TensorBoard):
    """Keras's TensorBoard callback, writing where `tfdist tensorboard ID` serves the job's event files (a
    `log_dir` given is replaced, as Determined does on-cluster)."""

    def __init__(self, core_context, *args: Any, **kwargs: Any) -> None:
        path = str(core_context.train.get_tensorboard_path())
        if "log_dir" in kwargs:
            kwargs.pop("log_dir")
        elif args:
            args = args[1:]
        super().__init__(path, *args, **kwargs)

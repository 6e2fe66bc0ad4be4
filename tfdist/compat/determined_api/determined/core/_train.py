"""`core_context.train`: metrics into tfdist's (the job's metrics in the coordinator's SQLite, `tfdist metrics`,
the searcher's reads). tfdist keeps one series per name, not Determined's groups, so the groups are names:
validation metrics keep their own names (the searcher's `metric` is a validation metric, as in Determined),
training metrics are `train_<name>`, another group's `<group>_<name>`. A validation report's `epochs` (the Keras
callback's) is also tfdist's `epoch`, by which a searcher counts `max_length: {epochs: N}`."""

from __future__ import annotations

import enum
import logging
import math
import numbers
from typing import Any, Callable, Dict, List, Optional

from determined._unoffered import unoffered
from tfdist import metrics as tfdist_metrics
from tfdist.event_files import this_jobs_event_dir

log = logging.getLogger("determined.core")
EPOCH = "epoch"  # the name tfdist's searcher reads a trial's epochs by (cluster/coordinator/experiments/runner.py)


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


def series_name(group: str, name: str) -> str:
    """The tfdist metric a Determined group's metric is kept as."""
    if group == "validation":
        return name
    prefix = "train_" if group == "training" else f"{group}_"
    return name if name.startswith(prefix) else prefix + name


class TrainContext:
    def __init__(self, distributed, on_report: Callable[[int], None] = lambda steps: None,
                 on_validation: Callable[[int, Dict[str, Any]], None] = lambda steps, metrics: None) -> None:
        self._dist = distributed
        self._on_report = on_report  # the steps of the latest report (the checkpoints' and preemption's default)
        self._on_validation = on_validation  # a validation's metrics as reported (the searcher's max_time)
        self._metadata: Dict[str, Any] = {}
        self._skipped: set[str] = set()
        self._status = ""

    def report_training_metrics(self, steps_completed: int, metrics: Dict[str, Any],
                                batch_metrics: Optional[List[Dict[str, Any]]] = None) -> None:
        self.report_metrics("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Dict[str, Any]) -> None:
        self.report_metrics("validation", steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Dict[str, Any]) -> None:
        if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
            raise ValueError(f"steps_completed must be a non-negative integer, got {steps_completed!r}")
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict of name to value, got {type(metrics).__name__}")
        values = {}
        for name, value in metrics.items():
            number = _number(value)
            if number is None:
                self._skip(str(name), value)
                continue
            values[series_name(group, str(name))] = number
        if group == "validation" and _number(metrics.get("epochs")) is not None:
            values[EPOCH] = _number(metrics["epochs"])
        if values:
            tfdist_metrics.report_metrics(steps_completed, **values)
        self._on_report(steps_completed)
        if group == "validation":
            self._on_validation(steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        """Determined's web UI bar; tfdist shows steps and metrics (`tfdist job`), so only its range is checked."""
        if not 0 <= float(progress) <= 1:
            raise ValueError(f"report_progress: progress is a fraction from 0 to 1, got {progress!r}")

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        log.warning("trial reports an early exit: %s", getattr(reason, "value", reason))

    def set_status(self, status: str) -> None:
        self._status = str(status)

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        self._metadata = dict(metadata)

    def get_metadata(self) -> Dict[str, Any]:
        return dict(self._metadata)

    def get_tensorboard_path(self):
        """Where the chief's TensorBoard event files go: the job's event directory that `tfdist tensorboard ID`
        serves; another rank's stay in a directory of its own beside it."""
        import pathlib

        base = pathlib.Path(this_jobs_event_dir())
        return base if self._dist.rank == 0 else base.parent / f"{base.name}-rank{self._dist.rank}"

    def upload_tensorboard_files(self, selector: Callable = lambda _: True,
                                 mangler: Callable = lambda p, __: p) -> None:
        """The files are written where tfdist serves them: nothing to upload."""

    def get_experiment_best_validation(self) -> Optional[float]:
        unoffered("core_context.train.get_experiment_best_validation()", "the API of a Determined master")

    def _skip(self, name: str, value: Any) -> None:
        if name not in self._skipped:
            self._skipped.add(name)
            log.warning("metric %s=%r is not a number: tfdist keeps numbers only (not said again)", name, value)


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Number):
        number = float(value)
    elif hasattr(value, "item") and callable(value.item):  # numpy and framework scalars
        try:
            number = float(value.item())
        except (TypeError, ValueError):
            return None
    else:
        return None
    return number if math.isfinite(number) else None


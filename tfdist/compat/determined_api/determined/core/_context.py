"""`det.core.init()`: the Core API context, on tfdist's parts (docs/determined.md)."""

from __future__ import annotations

import enum
import logging
import sys
import types
from typing import Any, Dict, Optional, Union

from determined import _info, _tfdist
from determined.core._checkpoint import CheckpointContext
from determined.core._distributed import DistributedContext, DummyDistributedContext, of_job
from determined.core._preempt import PreemptContext, PreemptMode
from determined.core._searcher import SearcherContext
from determined.core._train import TrainContext, series_name
from tfdist import metrics as tfdist_metrics
from tfdist.compat import rendezvous

log = logging.getLogger("determined.core")


class TensorboardMode(enum.Enum):
    AUTO = "AUTO"
    MANUAL = "MANUAL"


class Context:
    def __init__(self, distributed: DistributedContext, storage: Optional[str], preempt_mode: PreemptMode) -> None:
        self._steps = 0
        self._finished = False
        self.distributed = distributed
        self.train = TrainContext(distributed, on_report=self._reported, on_validation=self._validated)
        self.checkpoint = CheckpointContext(distributed, lambda: self._steps, storage)
        self.preempt = PreemptContext(distributed, lambda: self._steps, preempt_mode, lambda: self._finished)
        self.searcher = SearcherContext(distributed, self._searcher_metric)
        self.info = _info.get_cluster_info()
        latest = self.info.trial._steps_completed if self.info else 0
        self._steps = latest

    def _reported(self, steps: int) -> None:
        self._steps = steps

    def _validated(self, steps: int, metrics: Dict[str, Any]) -> None:
        """A trial of a search that reports validation at its searcher's length (max_length, or 0.38's time_metric
        at max_time) is done: Determined's searcher stops it there, so `should_preempt()` says stop and the run ends
        as completed. Scripts of either generation that stop by themselves at that length never see it."""
        if self._finished:
            return
        reached = _length_reached(_tfdist.context(), steps, metrics)
        if reached:
            self._finished = True
            print(f"tfdist: the trial reached the searcher's length ({reached}): it stops at its next preemption "
                  "check, as Determined's searcher stops it", file=sys.stderr, flush=True)

    def _searcher_metric(self, name: str, value: float) -> None:
        tfdist_metrics.report_metrics(self._steps, **{series_name("validation", name): value})

    def start(self) -> "Context":
        self.preempt.start()
        return self

    def close(self, exc_type: Optional[type] = None, exc_val: Optional[BaseException] = None,
              exc_tb: Optional[types.TracebackType] = None) -> None:
        self.preempt.close()
        self.distributed.close()

    def alert(self, title: Optional[str] = None, description: Optional[str] = None,
              level: Optional[str] = "info") -> None:
        print(f"tfdist: alert ({level}): {title or ''}{': ' + description if description else ''}", file=sys.stderr,
              flush=True)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.close(exc_type, exc_val, exc_tb)


def init(*, distributed: Optional[DistributedContext] = None,
         checkpoint_storage: Optional[Union[str, Dict[str, Any]]] = None,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> Context:
    """The Core API's context. Without `distributed`, the job's own processes (Determined gives one process
    alone; under tfdist every process of the job is already placed, so they meet as one). Counts as this
    worker joining the job (its startup timeout stops)."""
    storage = _storage_dir(checkpoint_storage)
    if distributed is None:
        distributed = of_job() if _tfdist.launched() else DummyDistributedContext()
    context = Context(distributed, storage, preempt_mode).start()
    if _tfdist.launched():
        rendezvous.signal_ready()
    return context


def _length_reached(ctx, steps: int, metrics: Dict[str, Any]) -> str:
    """What says a trial reached its searcher's length ("" when it has not, or is no search's trial)."""
    searcher = ctx.searcher
    if "max_time" in searcher:
        unit, most = searcher.get("time_metric"), searcher["max_time"]
    elif isinstance(searcher.get("max_length"), dict) and len(searcher["max_length"]) == 1:
        (unit, most), = searcher["max_length"].items()
    else:
        return ""
    if unit == "batches" and "batches" not in metrics:
        value: Any = steps
    elif unit == "records" and "records" not in metrics:
        value = steps * (ctx.global_batch_size or 1)
    else:
        value = metrics.get(unit, metrics.get("epoch") if unit == "epochs" else None)
    try:
        return f"{unit} {float(value):g} of {float(most):g}" if float(value) >= float(most) else ""
    except (TypeError, ValueError):
        return ""


def _storage_dir(value: Optional[Union[str, Dict[str, Any]]]) -> Optional[str]:
    """init(checkpoint_storage=...): a directory, or Determined's shared_fs mapping."""
    if value is None:
        return None
    if isinstance(value, str):
        if "://" in value:
            raise ValueError(f"checkpoint_storage={value!r}: tfdist writes checkpoints to a directory every node "
                             "shares, not to a bucket; give a path (or leave it out: the job's checkpoint_storage)")
        return value
    if isinstance(value, dict) and value.get("type", "shared_fs") in ("shared_fs", "directory"):
        base = value.get("host_path") or value.get("container_path")
        sub = value.get("storage_path") or ""
        if isinstance(base, str) and base:
            return f"{base.rstrip('/')}/{sub}".rstrip("/") if sub else base
    raise ValueError(f"checkpoint_storage: tfdist writes checkpoints to a directory (a path, or {{type: shared_fs, "
                     f"host_path: DIR}}), got {value!r}")

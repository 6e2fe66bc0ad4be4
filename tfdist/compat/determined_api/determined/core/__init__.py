"""Determined's Core API (`det.core`), on tfdist: metrics, checkpoints, preemption, the searcher's length and
collectives, each a context of `det.core.init()`."""

from determined.core._checkpoint import CheckpointContext, DownloadMode, DummyCheckpointContext
from determined.core._context import Context, TensorboardMode, init
from determined.core._distributed import DistributedContext, DummyDistributedContext
from determined.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from determined.core._searcher import (DummySearcherContext, SearcherContext, SearcherContextMissing, SearcherMode,
                                       SearcherOperation, Unit)
from determined.core._train import EarlyExitReason, TrainContext

DummyTrainContext = TrainContext

__all__ = ["CheckpointContext", "Context", "DistributedContext", "DownloadMode", "DummyCheckpointContext",
           "DummyDistributedContext", "DummyPreemptContext", "DummySearcherContext", "DummyTrainContext",
           "EarlyExitReason", "PreemptContext", "PreemptMode", "SearcherContext", "SearcherContextMissing",
           "SearcherMode", "SearcherOperation", "TensorboardMode", "TrainContext", "Unit", "init"]

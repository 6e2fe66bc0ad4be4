"""`core_context.searcher.operations()` (Determined before 0.38): how long to train. tfdist's searchers decide
from the validation metrics a trial reports as it trains (an adaptive_asha loser is paused through
`should_preempt()`, and resumed from its checkpoint if it is promoted later), so a trial gets one operation: train
to the searcher's `max_length` (its count, in the unit the config names) and report the metric."""

from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Iterator, Optional

from determined import _info

log = logging.getLogger("determined.core")


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHEIF_ONLY"


class SearcherOperation:
    def __init__(self, length: int, is_chief: bool, report: Callable[[float], None]) -> None:
        self._length, self._is_chief, self._report = length, is_chief, report
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        if not self._is_chief:
            raise RuntimeError("op.report_progress() is the chief's (rank 0)")

    def report_completed(self, searcher_metric: Any) -> None:
        if not self._is_chief:
            raise RuntimeError("op.report_completed() is the chief's (rank 0)")
        self._completed = True
        self._report(float(searcher_metric))


class SearcherContext:
    def __init__(self, distributed, metric_reporter: Callable[[str, float], None]) -> None:
        self._dist = distributed
        self._report_metric = metric_reporter
        self._unit, self._length = _max_length()
        self._metric = str(_searcher_config().get("metric") or "")

    def operations(self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
                   auto_ack: bool = True) -> Iterator[SearcherOperation]:
        if self._length is None:
            raise RuntimeError("core_context.searcher.operations() trains for the searcher's max_length, and the "
                               "config gives none: set searcher.max_length (e.g. {batches: 1000}) or max_time")
        chief = self._dist.rank == 0
        if searcher_mode == SearcherMode.ChiefOnly and not chief:
            raise RuntimeError("SearcherMode.ChiefOnly: only the chief (rank 0) iterates operations()")
        op = SearcherOperation(self._length, chief, self._completed)
        yield op
        if chief and not op._completed:
            raise RuntimeError("an operation was not completed: call op.report_completed(metric) before asking "
                               "for the next one")

    def acknowledge_out_of_ops(self) -> None:
        """Nothing to acknowledge: tfdist's searcher decides from the metrics."""

    def get_configured_units(self) -> Optional[Unit]:
        return self._unit

    def _completed(self, value: float) -> None:
        if self._metric:
            self._report_metric(self._metric, value)


def _searcher_config() -> dict:
    info = _info.get_cluster_info()
    config = info.trial._config if info else {}
    searcher = config.get("searcher") if isinstance(config, dict) else None
    if not isinstance(searcher, dict):
        searcher = {}
    from determined import _tfdist  # the trial's searcher as tfdist hands it to an experiment's trials
    return {**searcher, **_tfdist.context().searcher}


def _max_length() -> tuple[Optional[Unit], Optional[int]]:
    searcher = _searcher_config()
    length = searcher.get("max_length")
    if isinstance(length, dict) and len(length) == 1:
        (unit, count), = length.items()
        return Unit[str(unit).upper()] if str(unit).upper() in Unit.__members__ else None, int(count)
    if isinstance(length, int) and not isinstance(length, bool):
        return None, length
    if isinstance(searcher.get("max_time"), int):
        unit = str(searcher.get("time_metric", "")).upper()
        return (Unit[unit] if unit in Unit.__members__ else None), searcher["max_time"]
    return None, None


class DummySearcherContext(SearcherContext):
    pass


class SearcherContextMissing(SearcherContext):
    pass

"""Determined's `searcher:` section, as tfdist runs it: one typed value (`SearcherConfig`) from the YAML's mapping.

`single` (or no searcher) is one job, as before. `grid`, `random` and `adaptive_asha` (Determined's) and `tpe`
(tfdist's: Optuna's model-based sampler) make an experiment: a search whose trials are gang jobs on the
coordinator's queue (cluster/coordinator/experiments/). Determined's keys are accepted as written; a key or
searcher tfdist does not run is one line naming it. Pure: cluster/shared/config.py applies it."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Sequence

from cluster.shared import hyperparameters, search_space
from cluster.shared.hyperparameters import _clip, _show  # the one way config errors show a bad value
from tfdist.errors import UserError

SINGLE = "single"
SEARCHING = ("grid", "random", "adaptive_asha", "tpe")  # what makes an experiment
DETERMINED_ONLY = ("async_halving", "pbt", "custom", "adaptive", "adaptive_simple", "sync_halving")
MODES = ("aggressive", "standard", "conservative")  # adaptive_asha's brackets (Determined's)
LENGTH_UNITS = ("batches", "records", "epochs")
_COMMON = ("name", "metric", "smaller_is_better", "max_length", "source_trial_id", "source_checkpoint_uuid")
_KEYS = {
    SINGLE: _COMMON,
    "grid": (*_COMMON, "max_concurrent_trials"),
    "random": (*_COMMON, "max_trials", "max_concurrent_trials"),
    "tpe": (*_COMMON, "max_trials", "max_concurrent_trials"),
    "adaptive_asha": (*_COMMON, "max_trials", "max_concurrent_trials", "max_rungs", "divisor", "mode",
                      "bracket_rungs", "stop_once", "time_metric", "max_time"),  # Determined's newer length
}
MAX_TRIALS = 10_000  # an experiment's trials are jobs: bounded as a submission is
DEFAULT_MAX_CONCURRENT = 16  # Determined's default


class SearcherError(UserError, ValueError):
    """`searcher:` is wrong; the message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class SearcherConfig:
    name: str = SINGLE
    metric: str = ""
    smaller_is_better: bool = True
    # (unit, count): ("epochs", 8); a unit that is no LENGTH_UNITS is a metric's name (Determined's newer
    # time_metric: a trial's length is that metric's reported value)
    max_length: tuple[str, int] | None = None
    max_trials: int = 1
    max_concurrent_trials: int = DEFAULT_MAX_CONCURRENT
    max_rungs: int = 5
    divisor: float = 4.0
    mode: str = "standard"
    bracket_rungs: tuple[int, ...] = ()
    stop_once: bool = False  # adaptive_asha: a trial that lost a rung ends at once (never promoted later)

    @property
    def searches(self) -> bool:
        return self.name != SINGLE

    def to_mapping(self) -> dict[str, Any]:
        """What travels with the experiment (and parses back to the same value)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["max_length"] = {self.max_length[0]: self.max_length[1]} if self.max_length else None
        if self.max_length and self.max_length[0] not in LENGTH_UNITS:
            out.update(max_length=None, time_metric=self.max_length[0], max_time=self.max_length[1])
        out["bracket_rungs"] = list(self.bracket_rungs)
        return {k: v for k, v in out.items() if v is not None and k in _KEYS[self.name]}


def parse(value: Any) -> SearcherConfig:
    """`searcher:` as written (None: none) into the typed value; SearcherError names the bad key."""
    if value is None:
        return SearcherConfig()
    if not isinstance(value, Mapping):
        raise SearcherError(f"searcher: expected a mapping such as {{name: random, metric: val_loss, max_trials: 8}}, "
                            f"got {_show(value)}")
    name = value.get("name")
    if name in DETERMINED_ONLY:
        raise SearcherError(f"searcher.name: {name} is Determined's; tfdist runs {', '.join((SINGLE, *SEARCHING))} "
                            "(adaptive_asha for early stopping)")
    if name not in _KEYS:
        what = "missing" if name is None else f"unknown searcher {_show(name)}"
        close = difflib.get_close_matches(str(name), list(_KEYS), n=1) if name is not None else []
        hint = f"did you mean {close[0]}? " if close else ""
        raise SearcherError(f"searcher.name: {what}; {hint}expected one of {', '.join((SINGLE, *SEARCHING))}")
    for key in value:
        if key not in _KEYS[name]:
            close = difflib.get_close_matches(str(key), _KEYS[name], n=1)
            hint = f"did you mean 'searcher.{close[0]}'? " if close else ""
            raise SearcherError(f"searcher.{_clip(str(key))}: not a key of searcher {name}; {hint}it takes "
                                f"{', '.join(_KEYS[name])}")
    for key in ("source_trial_id", "source_checkpoint_uuid"):
        if value.get(key) is not None:
            raise SearcherError(
                f"searcher.{key}: starting from another trial's checkpoint is Determined's; tfdist continues its "
                "own jobs with `tfdist resume ID`, or load the checkpoint in your script; drop this key")
    metric = value.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        raise SearcherError(f"searcher.metric: expected a metric's name such as val_loss, got {_show(metric)}")
    if name != SINGLE and not metric:
        raise SearcherError(f"searcher.metric: searcher {name} needs the metric it optimises, e.g. metric: val_loss "
                            "(what your script reports through tfdist's MetricsReporter or tfdist.report_metrics)")
    smaller = value.get("smaller_is_better", True)
    if not isinstance(smaller, bool):
        raise SearcherError(f"searcher.smaller_is_better: expected true or false, got {_show(smaller)}")
    length = _length(value.get("max_length"))
    if value.get("time_metric") is not None or value.get("max_time") is not None:
        length = _time(value, length)
    if name == "adaptive_asha" and length is None:
        raise SearcherError("searcher.max_length: adaptive_asha needs the longest a trial trains, e.g. "
                            "max_length: {epochs: 8}, or time_metric: batches with max_time: 6400 (its rungs are fractions of it)")
    needs_trials = name in ("random", "tpe", "adaptive_asha")
    if needs_trials and "max_trials" not in value:
        raise SearcherError(f"searcher.max_trials: searcher {name} needs how many trials to run, e.g. max_trials: 16")
    max_trials = _int(value.get("max_trials", 1), "max_trials", 1, MAX_TRIALS)
    concurrent = _int(value.get("max_concurrent_trials", DEFAULT_MAX_CONCURRENT), "max_concurrent_trials", 0,
                      MAX_TRIALS) or DEFAULT_MAX_CONCURRENT  # Determined's 0: its default
    divisor = value.get("divisor", 4)
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)) or not 1 < divisor <= 1000:
        raise SearcherError(f"searcher.divisor: expected a number greater than 1 (each rung keeps 1/divisor of the "
                            f"trials), got {_show(divisor)}; e.g. divisor: 4")
    mode = value.get("mode", "standard")
    if mode not in MODES:
        raise SearcherError(f"searcher.mode: expected one of {', '.join(MODES)}, got {_show(mode)}")
    brackets = value.get("bracket_rungs") or []
    if not isinstance(brackets, list) or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 32
                                             for b in brackets):
        raise SearcherError(f"searcher.bracket_rungs: expected a list of rung counts (1-32), got {_show(brackets)}")
    stop_once = value.get("stop_once", False)
    if not isinstance(stop_once, bool):
        raise SearcherError(f"searcher.stop_once: expected true or false, got {_show(stop_once)}")
    if stop_once:
        raise SearcherError("searcher.stop_once: true is not supported: tfdist's adaptive_asha pauses a trial that "
                            "loses a rung at its checkpoint and may promote it later (Determined's stop_once: false); "
                            "drop the key")
    return SearcherConfig(name=name, metric=metric or "", smaller_is_better=smaller, max_length=length,
                          max_trials=max_trials, max_concurrent_trials=concurrent,
                          max_rungs=_int(value.get("max_rungs", 5), "max_rungs", 1, 32), divisor=float(divisor),
                          mode=mode, bracket_rungs=tuple(brackets), stop_once=stop_once)


def most_trials(config: SearcherConfig, space: Mapping[str, Any]) -> int:
    """The trials (each a job) a search makes at most: the grid's points, else max_trials (adaptive_asha's
    brackets share them out). A local run reserves a job number for each (cluster/client/local_runs.py)."""
    return len(search_space.grid(space)) if config.name == "grid" else config.max_trials


def _length(length: Any) -> tuple[str, int] | None:
    if length is None:
        return None
    units = length if isinstance(length, Mapping) else {"batches": length}
    bad = not units or len(units) != 1 or next(iter(units)) not in LENGTH_UNITS
    count = next(iter(units.values()), None) if not bad else None
    if bad or isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SearcherError(f"searcher.max_length: expected a positive integer or one of "
                            f"{{batches: N}}, {{records: N}}, {{epochs: N}}, got {_show(length)}")
    return next(iter(units)), count


def _time(value: Mapping[str, Any], length: tuple[str, int] | None) -> tuple[str, int]:
    """Determined's newer `time_metric` + `max_time`: batches, records or epochs is max_length in that unit;
    another metric's name measures a trial by that metric's value (reported with the searcher metric)."""
    if length is not None:
        raise SearcherError("searcher.time_metric: give max_length or time_metric with max_time, not both")
    metric, count = value.get("time_metric"), value.get("max_time")
    if not isinstance(metric, str) or not metric.strip():
        raise SearcherError(f"searcher.time_metric: expected batches, records, epochs or a metric's name (with "
                            f"max_time), got {_show(metric)}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SearcherError(f"searcher.max_time: expected a positive integer (the longest a trial trains, in "
                            f"time_metric), got {_show(count)}")
    return metric, count


def _int(value: Any, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SearcherError(f"searcher.{key}: expected an integer from {low} to {high:,}, got {_show(value)}")
    return value


# ---------------------------------------------------------------- Determined's searcher translated

def capped_by_slots(searcher: Any, max_slots: int, slots: Any) -> Any:
    """Determined's resources.max_slots as the trials an experiment runs at once (the searcher as written)."""
    if not isinstance(searcher, dict) or searcher.get("name") not in SEARCHING or not isinstance(slots, int):
        return searcher
    cap = max(1, max_slots // max(1, slots))
    given = searcher.get("max_concurrent_trials") or 16  # Determined's 0: its default
    return {**searcher, "max_concurrent_trials": min(given, cap) if isinstance(given, int) else given}


def single_as_drawn(searcher: dict, space: Any, overrides: Sequence[str], notes: list[str]) -> dict:
    """Determined's single searcher draws searched hyperparameters' values once (random, one trial); those a
    `--hparam` gives are not searched (a bad one is said where the values are resolved: config._hyperparameters)."""
    try:
        searched = isinstance(space, Mapping) and search_space.leaves(hyperparameters.apply_overrides(space, overrides))
    except hyperparameters.HyperparameterError:
        searched = bool(search_space.leaves(space))
    if not searched:
        return searcher
    notes.append("searcher.name: single with searched hyperparameters draws their values once, as Determined does: "
                 "an experiment of one trial (random, max_trials 1)")
    return {**searcher, "name": "random", "max_trials": 1, "max_concurrent_trials": 1}

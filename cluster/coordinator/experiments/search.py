"""An experiment's search as one state and three events: `begin`, `observed` (a trial's searcher metric at
a length) and `ended` (a trial's job ended by itself). Each returns what to do with trials, in order, as
values (`Create`, `Continue`, `Pause`, `Stop`); the experiments executor applies them in the same store
transaction as the event that caused them. Pure and deterministic: the state is plain data kept with the
experiment, and the values are drawn from the experiment's seed (sampling.py).

grid, random and tpe run up to max_concurrent_trials trials at once and start the next when one ends;
adaptive_asha's brackets decide at each rung (halving.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Union

from cluster.coordinator.experiments import halving, sampling
from cluster.shared import searcher
from cluster.shared.searcher import SearcherConfig


@dataclasses.dataclass(frozen=True)
class Create:
    number: int
    values: Mapping[str, Any]  # {path: value}


@dataclasses.dataclass(frozen=True)
class Continue:
    number: int  # promoted: a trial paused by the searcher is resumed (from its checkpoint)


@dataclasses.dataclass(frozen=True)
class Pause:
    number: int
    why: str  # it lost a rung for now: paused at a checkpoint, perhaps promoted later


@dataclasses.dataclass(frozen=True)
class Stop:
    number: int
    why: str  # the searcher is done with it: ended


Op = Union[Create, Continue, Pause, Stop]


@dataclasses.dataclass
class Trial:
    number: int
    values: dict[str, Any]
    bracket: int = 0
    rung: int = 0  # the rung it trains toward (adaptive_asha)
    waiting: bool = False  # paused by the searcher, after losing a rung
    done: bool = False  # ended, or the searcher is done with it
    latest: float | None = None  # its searcher metric, as reported
    best: float | None = None
    length: int = 0  # the length (max_length's unit) of its latest report
    why: str = ""  # why the searcher stopped or paused it
    job: str = ""  # its job's id
    asked_pause: bool = False  # the searcher asked its job to pause (a user's pause is the user's)


@dataclasses.dataclass
class SearchState:
    seed: int
    trials: list[Trial] = dataclasses.field(default_factory=list)
    brackets: list[halving.Bracket] = dataclasses.field(default_factory=list)

    def trial(self, number: int) -> Trial:
        return self.trials[number - 1]

    def to_plain(self) -> dict[str, Any]:
        return {"seed": self.seed, "trials": [dataclasses.asdict(t) for t in self.trials],
                "brackets": [halving.to_plain(b) for b in self.brackets]}

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> "SearchState":
        return cls(data["seed"], [Trial(**t) for t in data["trials"]],
                   [halving.from_plain(b) for b in data["brackets"]])


def max_trials(config: SearcherConfig, space: Mapping[str, Any]) -> int:
    return searcher.most_trials(config, space)


def begin(config: SearcherConfig, space: Mapping[str, Any], seed: int) -> tuple[SearchState, list[Op]]:
    state = SearchState(seed)
    ops: list[Op] = []
    if config.name == "adaptive_asha":
        unit, units = config.max_length or ("batches", 1)
        state.brackets = halving.brackets(config.max_trials, config.max_concurrent_trials, config.max_rungs, units,
                                          config.divisor, config.mode, config.bracket_rungs)
        for index, bracket in enumerate(state.brackets):
            for _ in range(bracket.initial):
                ops.append(_create(config, space, state, index))
        return state, ops
    for _ in range(min(config.max_concurrent_trials, max_trials(config, space))):
        ops.append(_create(config, space, state, 0))
    return state, ops


def observed(config: SearcherConfig, space: Mapping[str, Any], state: SearchState, number: int, metric: float,
             length: int) -> list[Op]:
    """Trial `number` reported the searcher metric at `length`. A report again (a retried batch, or from the
    steps a paused trial ran before it stopped) decides nothing new."""
    trial = state.trial(number)
    if trial.length >= length and trial.latest is not None:
        return []
    trial.latest, trial.length = metric, length
    better = trial.best is None or (metric < trial.best if config.smaller_is_better else metric > trial.best)
    trial.best = metric if better else trial.best
    if config.name != "adaptive_asha" or trial.done or trial.waiting:
        return []
    ops: list[Op] = []
    bracket = state.brackets[trial.bracket]
    signed = metric if config.smaller_is_better else -metric
    while not trial.done and not trial.waiting and number not in bracket.closed \
            and length >= bracket.rungs[trial.rung].units:
        rung = trial.rung
        ops += _apply(config, space, state, trial.bracket,
                      halving.reached(bracket, number, signed, config.divisor), rung)
    return ops


def ended(config: SearcherConfig, space: Mapping[str, Any], state: SearchState, number: int) -> list[Op]:
    """Trial `number`'s job ended by itself (its script's end, a failure, its user's cancel)."""
    trial = state.trial(number)
    if trial.done:
        return []
    waiting, trial.done = trial.waiting, True
    if config.name != "adaptive_asha":
        return [_create(config, space, state, 0)] if len(state.trials) < max_trials(config, space) else []
    return _apply(config, space, state, trial.bracket,
                  halving.ended(state.brackets[trial.bracket], number, config.divisor, waiting), trial.rung)


def finished(config: SearcherConfig, space: Mapping[str, Any], state: SearchState) -> bool:
    """Every trial it will make is made and done with (the executor waits for their jobs to end too)."""
    if config.name == "adaptive_asha":
        return all(halving.done(b) for b in state.brackets)
    return len(state.trials) >= max_trials(config, space) and all(t.done for t in state.trials)


def _apply(config: SearcherConfig, space: Mapping[str, Any], state: SearchState, bracket_index: int,
           decided: halving.Decisions, rung: int) -> list[Op]:
    ops: list[Op] = []
    bracket = state.brackets[bracket_index]
    for number in decided.continue_:
        other = state.trial(number)
        other.rung, other.why = bracket.rung_of[number], ""
        if other.waiting:
            other.waiting = False
            ops.append(Continue(number))
    for number in decided.wait:
        if number in decided.close:
            continue
        other = state.trial(number)
        other.waiting = True
        other.why = f"lost rung {rung + 1} ({config.metric} not in the best 1/{config.divisor:g} so far)"
        ops.append(Pause(number, other.why))
    for number in decided.close:
        other = state.trial(number)
        other.done, other.waiting = True, False
        other.why = f"stopped early: not promoted past rung {bracket.rung_of[number] + 1}"
        ops.append(Stop(number, other.why))
    for number, trial in ((t.number, t) for t in state.trials):
        if number in bracket.closed and not trial.done:  # reached the top rung: trains to its own end
            trial.rung = bracket.rung_of[number]
    for _ in range(decided.create):
        ops.append(_create(config, space, state, bracket_index))
    return ops


def _create(config: SearcherConfig, space: Mapping[str, Any], state: SearchState, bracket_index: int) -> Create:
    number = len(state.trials) + 1
    history = [(t.values, t.best) for t in state.trials if t.done and t.best is not None]
    values = sampling.values(config, space, state.seed, number, history)
    state.trials.append(Trial(number, values, bracket_index))
    if state.brackets:
        halving.add_trial(state.brackets[bracket_index], number)
    return Create(number, values)

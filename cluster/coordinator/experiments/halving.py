"""Asynchronous successive halving (ASHA) with pausing, as Determined's `adaptive_asha` runs it: pure.

A bracket has rungs of increasing length (max_length / divisor^k). Every trial starts toward rung 0; when it
reaches a rung's length its searcher metric is placed among that rung's results, and the best 1/divisor of the
results seen so far go on to the next rung: the trial itself if it is among them (it just keeps training), or
one that lost earlier and waits, paused at its checkpoint (it is resumed: it continues, never from step 0).
A trial that is not promoted waits; once every trial of the bracket has a result in rung 0, the rungs nothing
is still training toward close their waiting trials. `adaptive_asha` runs several brackets side by side
(`brackets`), as Determined's tournament does, each with its share of the trials and concurrency.

The state is plain data (kept as JSON in the coordinator's store with the experiment) and every function is a
deterministic step over it: the same events give the same decisions, before and after a coordinator restart."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

WORST = math.inf  # the result of a trial that ended before reaching its rung (smaller is better inside)


@dataclasses.dataclass
class Result:
    metric: float  # smaller is better (a larger-is-better metric is negated by the caller)
    trial: int
    promoted: bool = False


@dataclasses.dataclass
class Rung:
    units: int  # the length a trial trains to before its result here counts
    results: list[Result] = dataclasses.field(default_factory=list)  # sorted by metric
    outstanding: int = 0  # trials training toward this rung

    def promotions(self, trial: int, metric: float, divisor: float) -> list[int]:
        """Adds the trial's result; the trials that go to the next rung now (Determined's promotionsAsync): the
        new one if it is in the top 1/divisor, else, if the top grew by one, the best not yet promoted."""
        before = int(len(self.results) / divisor)
        after = int((len(self.results) + 1) / divisor)
        at = next((i for i, r in enumerate(self.results) if r.metric > metric), len(self.results))
        now = at < after
        self.results.insert(at, Result(metric, trial, now))
        if now:
            return [trial]
        if after != before and not self.results[before].promoted:
            self.results[before].promoted = True
            return [self.results[before].trial]
        return []


@dataclasses.dataclass
class Bracket:
    rungs: list[Rung]
    max_trials: int
    max_concurrent: int
    trials: list[int] = dataclasses.field(default_factory=list)  # its trials, in creation order
    rung_of: dict[int, int] = dataclasses.field(default_factory=dict)  # trial -> the rung it trains toward
    ended: list[int] = dataclasses.field(default_factory=list)  # ended by themselves (they cannot continue)
    closed: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def make(cls, num_rungs: int, max_units: int, divisor: float, max_trials: int, max_concurrent: int) -> "Bracket":
        rungs = [Rung(max(int(max_units / divisor ** (num_rungs - k - 1)), 1)) for k in range(num_rungs)]
        return cls(rungs, max_trials, max_concurrent)

    @property
    def initial(self) -> int:
        """How many trials it starts with: its concurrency (Determined's)."""
        return max(min(self.max_concurrent, self.max_trials), 1)


@dataclasses.dataclass(frozen=True)
class Decisions:
    continue_: tuple[int, ...] = ()  # promoted: train on toward the next rung (a waiting one is resumed)
    wait: tuple[int, ...] = ()  # lost this rung for now: pause at a checkpoint (perhaps promoted later)
    close: tuple[int, ...] = ()  # the bracket is done with them: end them
    create: int = 0  # new trials the bracket starts


def add_trial(bracket: Bracket, trial: int) -> None:
    bracket.trials.append(trial)
    bracket.rung_of[trial] = 0
    bracket.rungs[0].outstanding += 1


def reached(bracket: Bracket, trial: int, metric: float, divisor: float) -> Decisions:
    """The trial's result at the rung it trained toward (`metric`: smaller is better; WORST if it ended early).
    At the top rung the bracket is done with it (it trains on to its own end, max_length)."""
    index = bracket.rung_of[trial]
    rung = bracket.rungs[index]
    rung.outstanding -= 1
    decided, training_added = Decisions(), False
    if index == len(bracket.rungs) - 1:
        bracket.closed.append(trial)
    else:
        promoted = rung.promotions(trial, metric, divisor)
        if trial not in promoted and trial not in bracket.ended:
            decided = _merge(decided, Decisions(wait=(trial,)))
        for other in promoted:
            bracket.rung_of[other] = index + 1
            bracket.rungs[index + 1].outstanding += 1
            if other in bracket.ended:  # it cannot train: as if it ran and came last (Determined's early exit)
                return _merge(decided, reached(bracket, other, WORST, divisor))
            decided = _merge(decided, Decisions(continue_=(other,)))
            training_added = True
    if not training_added and len(bracket.trials) < bracket.max_trials:
        decided = _merge(decided, Decisions(create=1))
    if len(bracket.rungs[0].results) >= bracket.max_trials:
        decided = _merge(decided, Decisions(close=tuple(close_out(bracket))))
    return decided


def ended(bracket: Bracket, trial: int, divisor: float, waiting: bool) -> Decisions:
    """The trial's job ended by itself (succeeded, failed, canceled by its user). One that was training toward
    a rung counts as the worst result there (Determined's early exit); one that waited simply cannot continue."""
    if trial in bracket.ended or trial in bracket.closed:
        return Decisions()
    bracket.ended.append(trial)
    if waiting:
        return Decisions()
    return reached(bracket, trial, WORST, divisor)


def close_out(bracket: Bracket) -> list[int]:
    """Once rung 0 is full: the waiting trials of every rung that nothing trains toward any more, bottom up."""
    out = []
    for rung in bracket.rungs:
        if rung.outstanding > 0:
            break
        for result in rung.results:
            if not result.promoted and result.trial not in bracket.closed:
                bracket.closed.append(result.trial)
                if result.trial not in bracket.ended:
                    out.append(result.trial)
    return out


def done(bracket: Bracket) -> bool:
    return len(bracket.trials) >= bracket.max_trials and all(t in bracket.closed or t in bracket.ended
                                                             for t in bracket.trials) \
        and all(r.outstanding == 0 for r in bracket.rungs)


def _merge(a: Decisions, b: Decisions) -> Decisions:
    return Decisions(a.continue_ + b.continue_, a.wait + b.wait, a.close + b.close, a.create + b.create)


# ---------------------------------------------------------------- adaptive_asha's brackets (Determined's)

def brackets(max_trials: int, max_concurrent: int, max_rungs: int, max_units: int, divisor: float, mode: str,
             bracket_rungs: tuple[int, ...] = ()) -> list[Bracket]:
    """The brackets of an adaptive_asha search, most early stopping first: how many rungs each has (by
    `mode`, bounded by what max_length and max_trials allow), and each one's share of the trials (roughly
    equal budgets) and of the concurrency."""
    rungs = list(bracket_rungs)
    if not rungs:
        top = min(max_rungs, int(math.log(max_units) / math.log(divisor)) + 1,
                  int(math.log(max_trials) / math.log(divisor)) + 1)
        top = max(top, 1)
        rungs = {"aggressive": [top], "standard": list(range((top - 1) // 2 + 1, top + 1)),
                 "conservative": list(range(1, top + 1))}[mode]
    rungs = sorted(rungs, reverse=True)[:max(max_trials, 1)]  # a bracket has a trial at least: no more than them
    weights = [divisor ** (n - 1) / n for n in rungs]
    trials = [max(int(w / sum(weights) * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    concurrent_total = max(max_concurrent, len(rungs))
    share, extra = divmod(concurrent_total, len(rungs))
    concurrent = [share + (1 if i < extra else 0) for i in range(len(rungs))]
    return [Bracket.make(n, max_units, divisor, t, c) for n, t, c in zip(rungs, trials, concurrent)]


def to_plain(bracket: Bracket) -> dict[str, Any]:
    return dataclasses.asdict(bracket)


def from_plain(data: dict[str, Any]) -> Bracket:
    rungs = [Rung(r["units"], [Result(**x) for x in r["results"]], r["outstanding"]) for r in data["rungs"]]
    return Bracket(rungs, data["max_trials"], data["max_concurrent"], list(data["trials"]),
                   {int(k): v for k, v in data["rung_of"].items()}, list(data["ended"]), list(data["closed"]))

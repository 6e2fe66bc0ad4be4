"""A trial's hyperparameter values: Determined's grid in order, or drawn by Optuna's samplers (random; TPE,
which learns from the trials that ended). Deterministic: trial N of an experiment draws from a sampler seeded
by (experiment seed, N) over the history it is given, so a coordinator restart draws the same values.

Optuna (the `search` extra) is imported here alone, when a trial is drawn."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from cluster.shared import search_space
from cluster.shared.searcher import SearcherConfig
from tfdist.errors import UserError

INSTALL_HINT = "pip install 'tfdist[search]' on the coordinator's machine (Optuna draws the trials' values)"


class SamplingUnavailable(UserError):
    """Optuna is not installed where the coordinator runs."""


def trial_seed(seed: int, number: int) -> int:
    return (seed * 1_000_003 + number * 7_919) % (2 ** 32)


def values(config: SearcherConfig, space: Mapping[str, Any], seed: int, number: int,
           history: Sequence[tuple[Mapping[str, Any], float]] = ()) -> dict[str, Any]:
    """{path: value} for trial `number` (1, 2, ...). `history`: (values, metric) of the trials that ended with a
    metric, for TPE."""
    found = search_space.leaves(space)
    if not found:
        return {}
    if config.name == "grid":
        return search_space.grid(space)[number - 1]
    optuna = _optuna()
    distributions = {path: _distribution(optuna, spec) for path, spec in found}
    if config.name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=trial_seed(seed, number), n_startup_trials=4)
    else:
        sampler = optuna.samplers.RandomSampler(seed=trial_seed(seed, number))
    study = optuna.create_study(direction="minimize" if config.smaller_is_better else "maximize", sampler=sampler)
    for past, metric in history if config.name == "tpe" else ():
        if not math.isfinite(metric):
            continue
        params = {path: _to_optuna(spec, past[path]) for path, spec in found if path in past}
        if len(params) == len(found):
            study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=metric))
    drawn = study.ask(distributions).params
    return {path: _from_optuna(spec, drawn[path]) for path, spec in found}


def _optuna():
    try:
        import optuna
    except ImportError:
        raise SamplingUnavailable(f"drawing hyperparameters needs Optuna: {INSTALL_HINT}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distribution(optuna, spec: Mapping[str, Any]):
    kind = spec["type"]
    if kind == "int":
        return optuna.distributions.IntDistribution(spec["minval"], spec["maxval"])
    if kind == "double":
        return optuna.distributions.FloatDistribution(float(spec["minval"]), float(spec["maxval"]))
    if kind == "log":  # base ** uniform(minval, maxval) is log-uniform between the powers
        base = float(spec["base"])
        low, high = sorted((base ** spec["minval"], base ** spec["maxval"]))
        return optuna.distributions.FloatDistribution(low, high, log=True)
    return optuna.distributions.CategoricalDistribution(list(range(len(spec["vals"]))))  # any YAML value: by index


def _to_optuna(spec: Mapping[str, Any], value: Any) -> Any:
    if spec["type"] == "categorical":
        return next((i for i, v in enumerate(spec["vals"]) if v == value), 0)
    return value


def _from_optuna(spec: Mapping[str, Any], value: Any) -> Any:
    if spec["type"] == "categorical":
        return spec["vals"][value]
    return value

"""An experiment's search space: the typed hyperparameters its config keeps (hyperparameters.resolve with
`search`), named by path ("lr", "opt.dropout", "sizes[1]"), and a trial's values put back in their place.

Pure. Grid points follow Determined's rules: a numeric hyperparameter takes `count` evenly spaced values
(a log one evenly spaced powers; an int one rounded, repeats dropped), a categorical all its values, and the
grid is their product in the order the config lists them."""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Mapping, Sequence

from cluster.shared.hyperparameters import SEARCH_TYPES, HyperparameterError

MAX_GRID = 10_000  # the grid's trials are jobs: bounded as a submission is


def leaves(space: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every searched hyperparameter as (path, spec), in the config's order."""
    return list(_walk(space, ""))


def _walk(value: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(value, Mapping):
        if value.get("type") in SEARCH_TYPES:
            yield path, value
            return
        if "type" not in value:
            for key, item in value.items():
                yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")


def assign(space: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The space with each searched hyperparameter replaced by its value in `values` (by path)."""
    def put(value: Any, path: str) -> Any:
        if isinstance(value, Mapping):
            if value.get("type") in SEARCH_TYPES:
                if path not in values:
                    raise HyperparameterError(f"hyperparameters.{path}: the trial has no value for it")
                return values[path]
            return {k: put(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [put(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value
    return put(dict(space), "")


def grid_axis(path: str, spec: Mapping[str, Any]) -> list[Any]:
    """One hyperparameter's grid values (Determined's)."""
    kind = spec["type"]
    if kind == "categorical":
        return list(spec["vals"])
    count = spec.get("count")
    if count is None:
        raise HyperparameterError(f"hyperparameters.{path}: a grid search needs `count` for type {kind} (how many "
                                  f"values it takes between minval and maxval), e.g. count: 3")
    low, high = spec["minval"], spec["maxval"]
    points = [low] if count == 1 else [low + (high - low) * i / (count - 1) for i in range(count)]
    if kind == "int":
        return list(dict.fromkeys(int(round(p)) for p in points))
    if kind == "log":
        return [float(spec["base"]) ** p for p in points]
    return [float(p) for p in points]


def grid(space: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every grid point as {path: value}, in order; bounded by MAX_GRID."""
    found = leaves(space)
    axes: Sequence[list[Any]] = [grid_axis(path, spec) for path, spec in found]
    size = 1
    for axis in axes:
        size *= len(axis)
    if size > MAX_GRID:
        raise HyperparameterError(f"hyperparameters: the grid has {size:,} points; the limit is {MAX_GRID:,} "
                                  "(lower some counts, or use searcher random)")
    return [dict(zip((p for p, _ in found), point)) for point in itertools.product(*axes)]

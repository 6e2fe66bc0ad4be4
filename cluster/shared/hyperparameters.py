"""Determined's hyperparameters: the values a job's workers get, or the space an experiment searches.

A hyperparameter is a plain value, a nested group (a mapping without `type`), or a typed spec:
`{type: const, val: V}` becomes V; `int`, `double`, `log` and `categorical` describe a search space, each
checked as Determined checks it. Under a searcher that searches (cluster/shared/searcher.py) they are kept, and
each trial gets its values (cluster/shared/search_space.py); without one they are refused in one line that says
how to search or how to give one value (`{type: const, val: ...}` or `--hparam NAME=VALUE`).
`--hparam NAME=VALUE` replaces one hyperparameter (a dotted NAME reaches into a group) before
the specs are resolved, so it can also give a searched one its value.

Pure functions over the YAML's values; cluster/shared/config.py applies them (and turns this module's error
into its ConfigError)."""

from __future__ import annotations

import datetime
import difflib
import json
import math
from typing import Any, Mapping, NoReturn, Sequence


from cluster.shared import limits
from cluster.shared.config_file import ConfigFileError, load_yaml, yaml_errors
from tfdist.errors import UserError

SEARCH_TYPES = ("int", "double", "log", "categorical")
TYPES = ("const", *SEARCH_TYPES)
_KEYS = {  # each type's keys, required first (Determined's expconf hyperparameter-*.json)
    "const": (("val",), ()),
    "int": (("minval", "maxval"), ("count",)),
    "double": (("minval", "maxval"), ("count",)),
    "log": (("minval", "maxval", "base"), ("count",)),
    "categorical": (("vals",), ()),
}
ALWAYS_SETTABLE = ("global_batch_size",)  # tfdist reads it itself: --hparam may add it to any config


class HyperparameterError(UserError, ValueError):
    """A hyperparameter or `--hparam` is wrong; the message names the key path and the fix."""


# ---------------------------------------------------------------- resolving the config's hyperparameters

def resolve(spec: Any, overrides: Sequence[str] = (), search: bool = False) -> dict[str, Any]:
    """The values the workers get from the config's `hyperparameters` as written and the `--hparam`s over
    them (`apply_overrides`): every typed spec checked, a `const` replaced by its value, groups and lists
    walked (Determined resolves list items too). A search type is kept as written under a searcher that
    searches (`search`), else refused."""
    if not isinstance(spec, Mapping):
        raise HyperparameterError(f"hyperparameters: expected a mapping, got {_show(spec)}")
    _check_bounds(spec)  # before any walk: a YAML alias bomb or a deep nest costs no more than the bounds
    spec = apply_overrides(spec, overrides)
    return {key: _resolve(value, f"hyperparameters.{key}", str(key), search) for key, value in spec.items()}


def check_values(value: Any) -> dict[str, Any]:
    """The resolved values' rules (what a coordinator checks on the wire too): a mapping with string keys,
    within limits.MAX_HPARAM_DEPTH/NODES/CHARS, that JSON can write (they reach workers as JSON)."""
    if not isinstance(value, Mapping):
        raise HyperparameterError(f"hyperparameters: expected a mapping, got {_show(value)}")
    for key in value:
        if not isinstance(key, str):
            raise HyperparameterError(f"hyperparameters: keys must be strings, got {_clip(repr(key))} "
                                      f"({type(key).__name__})")
    _check_bounds(value)
    try:
        text = json.dumps(dict(value), sort_keys=True, default=str)
    except (TypeError, ValueError) as e:
        raise HyperparameterError(f"hyperparameters: cannot be written as JSON for the workers: {e}") from None
    if len(text) > limits.MAX_HPARAM_CHARS:
        _too_large(f"are {len(text):,} characters as JSON; the limit is {limits.MAX_HPARAM_CHARS:,}")
    return dict(value)


def _check_bounds(value: Mapping[str, Any]) -> None:
    problem = limits.tree_problem(value)  # iterative; stops at the first bound passed
    if problem:
        _too_large(problem)


def _too_large(problem: str) -> NoReturn:
    raise HyperparameterError(f"hyperparameters: {problem} (they reach every worker as one environment variable; "
                              "pass large inputs in a file)")


def _resolve(value: Any, where: str, flag: str | None, search: bool) -> Any:
    """`flag`: the --hparam NAME that sets this value (None inside a list: a flag replaces the whole list)."""
    if isinstance(value, Mapping):
        if "type" not in value:
            return {k: _resolve(v, f"{where}.{k}", flag and f"{flag}.{k}", search) for k, v in value.items()}
        kind = check_spec(value, where)
        if kind == "const":
            return value["val"]
        if search:
            return dict(value)
        one = _yaml(example(value))
        flag_fix = f" or --hparam {flag}={one}" if flag else ""
        raise HyperparameterError(f"{where}: type {kind} needs a searcher that searches (e.g. searcher: {{name: "
                                  f"random, metric: val_loss, max_trials: 8}}); or give one value with "
                                  f"{{type: const, val: {one}}}{flag_fix}")
    if isinstance(value, (list, tuple)):
        return [_resolve(v, f"{where}[{i}]", None, search) for i, v in enumerate(value)]
    return value


def check_spec(spec: Mapping[str, Any], where: str) -> str:
    """A typed spec's own rules (Determined's): a known type, its keys and no others, numbers where numbers
    go, minval < maxval, base > 0 and not 1, count a positive integer, vals a non-empty list. Its type."""
    kind = spec["type"]
    if not isinstance(kind, str) or kind not in TYPES:
        close = difflib.get_close_matches(str(kind), TYPES, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise HyperparameterError(
            f"{where}.type: unknown hyperparameter type {_show(kind)}; {hint}expected one of {', '.join(TYPES)} "
            f"(a value that is a mapping with a 'type' key of its own: write {{type: const, val: {{...}}}})")
    required, optional = _KEYS[kind]
    for key in spec:
        if key != "type" and key not in required + optional:
            allowed = required + optional
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise HyperparameterError(f"{where}.{_clip(str(key))}: unknown key for type {kind}; {hint}"
                                      f"type {kind} takes {', '.join(allowed)}")
    for key in required:
        if key not in spec:
            raise HyperparameterError(f"{where}: type {kind} needs '{key}' ({_USAGE[kind]})")
    if kind in ("int", "double", "log"):
        integer = kind == "int"
        low = _number(spec["minval"], f"{where}.minval", integer)
        high = _number(spec["maxval"], f"{where}.maxval", integer)
        if not low < high:
            raise HyperparameterError(f"{where}: minval ({_show(low)}) must be less than maxval ({_show(high)}); "
                                      "swap them, or give one value with {type: const, val: ...}")
        if kind == "log":
            base = _number(spec["base"], f"{where}.base", False)
            if base <= 0 or base == 1:
                raise HyperparameterError(f"{where}.base: must be a number > 0 other than 1 (the values are "
                                          f"base ** minval .. base ** maxval), got {_show(base)}; e.g. base: 10")
        count = spec.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise HyperparameterError(f"{where}.count: must be a positive integer (how many values a grid "
                                      f"search takes) or left out, got {_show(count)}")
    if kind == "categorical":
        vals = spec["vals"]
        if not isinstance(vals, (list, tuple)) or not vals:
            raise HyperparameterError(f"{where}.vals: must be a non-empty list of the values to choose from, got "
                                      f"{_show(vals)}; e.g. vals: [adam, sgd]")
    return kind


_USAGE = {
    "const": "{type: const, val: 0.001}",
    "int": "{type: int, minval: 1, maxval: 8}",
    "double": "{type: double, minval: 0.1, maxval: 0.5}",
    "log": "{type: log, base: 10, minval: -4, maxval: -1}",
    "categorical": "{type: categorical, vals: [adam, sgd]}",
}


def example(spec: Mapping[str, Any]) -> Any:
    """One value from a checked search spec, to show in its error: the middle of a range (a log range's
    middle power), a categorical's first value."""
    kind = spec["type"]
    if kind == "categorical":
        return spec["vals"][0]
    low, high = spec["minval"], spec["maxval"]
    if kind == "int":
        return (low + high) // 2
    middle = (low + high) / 2
    if kind == "log":
        power = round(middle) if low <= round(middle) <= high else middle
        return float(f"{spec['base'] ** power:.3g}")
    return float(f"{middle:.3g}")


def _number(value: Any, where: str, integer: bool) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float)) and math.isfinite(value)
    if isinstance(value, bool) or not ok:
        raise HyperparameterError(f"{where}: expected {'an integer' if integer else 'a finite number'}, got "
                                  f"{_show(value)}")
    if isinstance(value, int) and value.bit_length() > 1024:
        raise HyperparameterError(f"{where}: a number of more than 300 digits; give a smaller one")
    return value


# ---------------------------------------------------------------- --hparam NAME=VALUE

def apply_overrides(spec: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`--hparam NAME=VALUE`s over the config's hyperparameters as written (before `resolve`), in order (a
    later one for the same NAME wins). Where the config defines hyperparameters, NAME must be one of them
    (a typo protection; global_batch_size is always allowed); a dotted NAME reaches into a group. Without any,
    every NAME is added."""
    result = _copy_groups(spec)
    known = leaf_names(spec)
    for override in overrides:
        name, value = parse_override(override)
        path = [name] if name in result or "." not in name else name.split(".")
        target = result
        for depth, key in enumerate(path[:-1]):
            if key not in target and not spec:
                target[key] = {}
            if not _is_group(target.get(key)):
                if not spec:  # an earlier --hparam made it a value
                    raise HyperparameterError(f"--hparam {_clip(override)}: {'.'.join(path[:depth + 1])} is a "
                                              "value, not a group of hyperparameters; give it one or the other")
                _unknown(override, name, known)
            target = target[key]
        last = path[-1]
        if spec and last not in target and name not in ALWAYS_SETTABLE:
            _unknown(override, name, known)
        if _is_group(target.get(last)) and target.get(last):
            members = ", ".join(sorted(str(k) for k in target[last]))
            raise HyperparameterError(f"--hparam {_clip(override)}: {name} is a group of hyperparameters "
                                      f"({_clip(members)}); set one of them: --hparam {name}.NAME=VALUE")
        target[last] = value
    return result


def parse_override(text: str) -> tuple[str, Any]:
    """NAME=VALUE; VALUE read as YAML: 0.001 a float, 32 an int, true a bool, null None, [64, 32] a list,
    {a: 1} a mapping; anything else (and an empty VALUE) stays the text it is."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise HyperparameterError(f"--hparam {_clip(text)!r}: expected NAME=VALUE, e.g. --hparam learning_rate=0.001")
    if not raw.strip():
        return name, raw
    flow = raw.lstrip()[:1] in ("[", "{")
    try:
        value = load_yaml(raw)
    except (yaml_errors(), ConfigFileError) as e:
        if flow:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise HyperparameterError(f"--hparam {_clip(text)}: VALUE is not a valid YAML list or mapping "
                                      f"({problem}); quote the whole flag, e.g. --hparam 'sizes=[64, 32]'") from None
        return name, raw
    if flow or value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, (datetime.date, datetime.datetime)):
            return name, raw
        return name, value
    return name, raw  # `a: b`, a date...: the text as given


def leaf_names(spec: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every hyperparameter's --hparam NAME: groups' members dotted."""
    names: list[str] = []
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if _is_group(value) and value:
            names.extend(leaf_names(value, name + "."))
        else:
            names.append(name)
    return names


def _unknown(override: str, name: str, known: list[str]) -> NoReturn:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise HyperparameterError(
        f"--hparam {_clip(override)}: the config has no hyperparameter {_clip(name)}; {hint}it has: "
        f"{_clip(', '.join(known), 200)} (add it to the config's hyperparameters to set it from the command line)")


def _copy_groups(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy whose groups are new dicts (the config's own value is never changed)."""
    return {k: _copy_groups(v) if _is_group(v) else v for k, v in spec.items()}


def _is_group(value: Any) -> bool:
    return isinstance(value, dict) and "type" not in value


# ---------------------------------------------------------------- showing values

def _yaml(value: Any) -> str:
    """A value as one would type it in YAML or after --hparam NAME=."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return _clip(str(value), 40)


def _show(value: Any) -> str:
    """A bad value in a message: a number as itself, anything else with its type (YAML's 'true' is a bool)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return _clip(repr(value)) if number else f"{_clip(repr(value))} ({type(value).__name__})"


def _clip(text: str, chars: int = 60) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."

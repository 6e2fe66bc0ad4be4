"""The checks of single config values, each raising ConfigError with one line that names the value (its place
in the config) and what would be right: what cluster/shared/config.py's rules are made of."""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Mapping

from cluster.shared import limits
from tfdist.errors import UserError


class ConfigError(UserError, ValueError):
    """A config value is wrong; the message names the value and the fix."""


def check_seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: expected a number of seconds >= 0 (0 turns it off), got {describe(value)}")
    if value > limits.MAX_SECONDS:
        raise ConfigError(f"{where}: {limits.seconds_problem(value)}")
    return float(value)


def check_text(value: Any, where: str, max_chars: int, *, empty: bool = True, printable: bool = False) -> str:
    problem = limits.text_problem(value, max_chars, empty=empty)
    if not problem and printable and any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = "contains a control character (a newline, a tab, an escape...)"
    if problem:
        raise ConfigError(f"{where}: {problem}, got {describe(value)}")
    return value


def check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {describe(value)}")
    return value



def clip(text: str, chars: int = 60) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, int) and value.bit_length() > 4000:
        return "a number of more than 1,200 digits (int)"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_mapping(value: Any, where: str, allowed: tuple[str, ...]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {describe(value)}")
    prefix = "" if where == "the config" else where + "."
    for key in value:
        if key not in allowed:
            key = clip(str(key))
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else \
                f"; tfdist supports: {', '.join(allowed)}"
            raise ConfigError(f"{prefix}{key}: unknown key{hint}")
    return value


def check_int(value: Any, where: str, *, minimum: int, maximum: int | None = None) -> int:
    # YAML `true` is a bool, which Python treats as an int: refuse it.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected an integer, got {describe(value)}")
    if value < minimum:
        raise ConfigError(f"{where}: must be at least {minimum}, got {describe_int(value)}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}: must be at most {maximum:,}, got {describe_int(value)}")
    return value


def describe_int(value: int) -> str:
    text = str(value) if value.bit_length() < 4000 else "a number of more than 1,200 digits"
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


def check_choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected one of {', '.join(choices)}, got {describe(value)}")
    if value not in choices:
        value = clip(value)
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"{where}: unknown value '{value}'; expected one of {', '.join(choices)}{hint}")
    return value


RESERVED_ENV_PREFIXES = ("TFDIST_",)
RESERVED_ENV_NAMES = ("TF_CONFIG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(value: Any, where: str = "environment.variables") -> dict[str, str]:
    """Environment variables as a mapping or Determined's list of "NAME=VALUE" strings (`where`: the key they
    were written under), each name valid and not tfdist's, within limits.MAX_ENV_*."""
    if value is None:
        return {}
    pairs: list[tuple[str, Any, str]] = []
    if isinstance(value, (Mapping, list)) and len(value) > limits.MAX_ENV_VARS:
        raise ConfigError(f"{where}: {len(value):,} variables; the limit is {limits.MAX_ENV_VARS:,}")
    if isinstance(value, Mapping):
        pairs = [(str(k), v, f"{where}.{clip(str(k))}") for k, v in value.items()]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(f"{where}[{i}]: expected a 'NAME=VALUE' string, got {describe(item)}")
            key, _, val = item.partition("=")
            pairs.append((key, val, f"{where}[{i}]"))
    else:
        raise ConfigError(f"{where}: expected a mapping or a list of 'NAME=VALUE' strings, got {describe(value)}")
    env: dict[str, str] = {}
    total = 0
    for key, val, at in pairs:
        if len(key) > limits.MAX_ENV_NAME_CHARS:
            raise ConfigError(f"{at}: a name of {len(key):,} characters; the limit is {limits.MAX_ENV_NAME_CHARS}")
        if not _ENV_NAME.fullmatch(key):
            raise ConfigError(f"{at}: '{key}' is not a valid environment variable name "
                              "(letters, digits and '_', not starting with a digit)")
        if key in RESERVED_ENV_NAMES or key.startswith(RESERVED_ENV_PREFIXES):
            raise ConfigError(f"{at}: {key} is set by tfdist for every worker and cannot be overridden")
        if isinstance(val, (dict, list)) or val is None:
            raise ConfigError(f"{at}: expected a string or number, got {describe(val)}")
        if isinstance(val, int) and not isinstance(val, bool) and val.bit_length() > 4000:
            raise ConfigError(f"{at}: a number of more than 1,200 digits; write it as a string")
        text = str(val).lower() if isinstance(val, bool) else str(val)
        env[key] = check_text(text, at, limits.MAX_ENV_VALUE_CHARS)
        total += len(key) + len(text)
        if total > limits.MAX_ENV_CHARS:
            raise ConfigError(f"{where}: names and values hold more than {limits.MAX_ENV_CHARS:,} "
                              "characters; pass large inputs in a file")
    return env

"""The checks of single config values, each raising ConfigError with one line that names the value (its place
in the config) and what would be right: what cluster/shared/config.py's rules are made of."""

from __future__ import annotations

import difflib
import math
from typing import Any

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

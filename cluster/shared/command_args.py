"""The vocabulary the `tfdist` command table (commands_table.py) is written in: an argument, a group of
arguments that exclude each other, a command, and the argument types (argparse wants ArgumentTypeError, in one
line naming the bad value)."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
from types import MappingProxyType
from typing import Any, Callable, Mapping

from cluster.shared import limits


@dataclasses.dataclass(frozen=True)
class Arg:
    """One `add_argument(*flags, **options)`. `default_from` gives the default when the parser is built
    (an environment variable, the host name), not when this module is imported."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]
    default_from: Callable[[], Any] | None = None

    def but(self, **options) -> Arg:
        """The same argument with some options changed (help=None: no help)."""
        return dataclasses.replace(self, options=MappingProxyType({**self.options, **options}))


def arg(*flags: str, default_from: Callable[[], Any] | None = None, **options) -> Arg:
    return Arg(flags, MappingProxyType(options), default_from)


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Arguments that exclude each other (argparse's mutually exclusive group)."""

    args: tuple[Arg, ...]


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    handler: Callable[[argparse.Namespace], int]
    args: tuple[Arg | OneOf, ...] = ()
    description: str | None = None


# ---------------------------------------------------------------- argument types (argparse wants ArgumentTypeError)

def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def positive_float(text: str) -> float:
    """Seconds: finite, positive, at most limits.MAX_SECONDS (`nan` and `inf` are floats, not durations)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {_shown(text)}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    problem = limits.seconds_problem(value, zero=False)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def non_negative_integer(text: str) -> int:
    value = integer(text)
    if not 0 <= value <= 10**9:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000000000, got {text}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 36500:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be between 0 and 36500, got {text}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_shown(text)}") from None


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An integer type within [low, high]."""
    def parse(text: str) -> int:
        value = integer(text)
        problem = limits.int_problem(value, low, high)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    return parse


def cidr(text: str) -> str:
    """A network such as 10.0.0.0/24 (checked when the coordinator starts, not at every placement)."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a network such as 10.0.0.0/24, got {_shown(text)}") from None
    return text


def port_range(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH, e.g. 29500-29999, got {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise argparse.ArgumentTypeError(f"must satisfy 1024 <= LOW <= HIGH <= 65535, got {text}")
    return low, high

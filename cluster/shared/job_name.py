"""A job's default name: what it runs. `python examples/digits/train.py` is `train`, `python -m pkg.mod` is
`pkg.mod`, `env A=1 python3 -u train.py` is `train`, any other program its own name (`./run.sh` is `run.sh`);
so `tfdist jobs` tells jobs apart without a `name:` in a config. Pure: the command's words in, a name out."""

from __future__ import annotations

import os
import re

from cluster.shared.limits import MAX_NAME_CHARS

FALLBACK = "job"  # no command (a config read before `--` gives one), or nothing printable in it
_PYTHON = re.compile(r"^python[0-9.]*w?$")
_OPTION_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")  # python's options that take the next word


def job_name(command: tuple[str, ...] | list[str]) -> str:
    words = list(command)
    if words and os.path.basename(words[0]) == "env":  # env [-i] [-u NAME] [NAME=VALUE]... PROGRAM
        words = _after_env(words[1:])
    if not words:
        return FALLBACK
    program = os.path.basename(words[0])
    if _PYTHON.match(program):
        program = _python_target(words[1:]) or program
    elif program.endswith(".py"):  # `tfdist launch -- train.py` runs it with Python
        program = program[:-3] or program
    return _printable(program)


def _after_env(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) and (words[i].startswith("-") or "=" in words[i]):
        i += 2 if words[i] in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") else 1
    return words[i:]


def _python_target(args: list[str]) -> str:
    """The module of `-m MODULE`, the script's name without `.py`, or "" (`-c CODE`, stdin, options only)."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-m" or (word.startswith("-m") and not word.startswith("--")):
            return (args[i + 1] if word == "-m" and i + 1 < len(args) else word[2:]) or ""
        if word == "-c" or word.startswith("-c") and not word.startswith("--") or word == "-":
            return ""
        if word in _OPTION_WITH_VALUE:
            i += 2
            continue
        if word.startswith("-") and word != "--":
            i += 1
            continue
        script = args[i + 1] if word == "--" and i + 1 < len(args) else word
        name = os.path.basename(script.rstrip("/"))
        return name[:-3] if name.endswith(".py") and len(name) > 3 else name
    return ""


def _printable(name: str) -> str:
    """Within the name's rules (printable, at most MAX_NAME_CHARS), or the fallback."""
    name = "".join(c for c in name if c.isprintable()).strip()[:MAX_NAME_CHARS]
    return name or FALLBACK

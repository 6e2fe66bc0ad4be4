"""Determined's launchers in an entrypoint, understood before the job starts: `python3 -m
determined.launch.tensorflow -- python3 train.py` is the command `python3 train.py` in tfdist's mwms mode (TF_CONFIG
for MultiWorkerMirroredStrategy, as Determined's launcher writes it), `.horovod` is tfdist's horovod mode,
`.torch_distributed` (and `.deepspeed`, which reads the same variables) its torch mode, `.wrap_rank N --` the
command alone. What tfdist does not run is one line: a Trial class (`--trial model_def:Trial`, or an entrypoint
`model_def:Trial`). Pure: the entrypoint's words in, the command and its mode out."""

from __future__ import annotations

import dataclasses
import os
import re

from tfdist.compat import determined_args
from tfdist.errors import UserError

# The tfdist mode each launcher stands for ("": none, the command's own).
MODES = {"determined.launch.tensorflow": "mwms", "determined.launch.horovod": "horovod",
         "determined.launch.torch_distributed": "torch", "determined.launch.deepspeed": "torch",
         "determined.launch.wrap_rank": ""}
# Said once when an entrypoint names Determined's TensorFlow launcher: its images had Keras 2 as tf.keras.
KERAS_3_NOTE = ("entrypoint: determined.launch.tensorflow: tf.keras is Keras 3 here (TensorFlow 2.21); a script "
                "written for Determined's Keras 2 images (optimizers.legacy, compile(optimizer, loss, metrics)) runs "
                "with environment_variables: [TF_USE_LEGACY_KERAS=1] (tf_keras, in tfdist's image)")
_PYTHON = re.compile(r"^python[0-9.]*$")
_TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # model_def:IrisTrial
_TRIAL_API = ("Determined's Trial class API, which tfdist does not run: train in a script (det.core.init() and "
              "det.keras.DeterminedCallback, or plain Keras/PyTorch) and name it in the entrypoint "
              "(docs/determined.md)")


class LauncherError(UserError, ValueError):
    """An entrypoint names what tfdist cannot run; the message names it and the way out."""


@dataclasses.dataclass(frozen=True)
class Unwrapped:
    command: tuple[str, ...]
    mode: str = ""  # the tfdist mode the launcher stands for; "": none (the command runs in the config's mode)
    launcher: str = ""  # e.g. "determined.launch.tensorflow"; "": the entrypoint names none


def unwrap(entrypoint: tuple[str, ...] | list[str]) -> Unwrapped:
    """The command an entrypoint runs and the mode its Determined launcher stands for. Launchers may nest
    (`wrap_rank 0 -- python3 -m determined.launch.torch_distributed ...`): the one that has a mode names it."""
    words = tuple(entrypoint)
    if len(words) == 1 and _TRIAL_CLASS.match(words[0]) and not os.path.exists(words[0]):
        raise LauncherError(f"entrypoint: {words[0]!r} is a Trial class: {_TRIAL_API}")
    name, rest = _launcher_of(words)
    if not name:
        return Unwrapped(words)
    try:
        parsed = determined_args.parse(name, rest)
    except determined_args.LauncherArgsError as e:
        raise LauncherError(f"entrypoint: {e}") from None
    if parsed.trial:
        raise LauncherError(f"entrypoint: {name} --trial {parsed.trial}: a Trial class is {_TRIAL_API}")
    inner = unwrap(parsed.script)
    mine = MODES[name]
    if mine and inner.mode and inner.mode != mine:
        raise LauncherError(f"entrypoint: {name} wraps {inner.launcher}; name one launcher")
    return Unwrapped(inner.command, mine or inner.mode, inner.launcher if inner.mode and not mine else name)


def _launcher_of(words: tuple[str, ...]) -> tuple[str, list[str]]:
    """(its module, the words after it) for `python3 [-u ...] -m determined.launch.tensorflow ...`, else ("", [])."""
    if not words or not _PYTHON.match(os.path.basename(words[0])):
        return "", []
    options = _python_options(list(words[1:]))
    if len(options) >= 2 and options[0] == "-m" and options[1].startswith(determined_args.PREFIX):
        if options[1] not in MODES:
            raise LauncherError(f"entrypoint: {options[1]} is not one of Determined's launchers tfdist understands "
                                f"({', '.join(MODES)})")
        return options[1], options[2:]
    return "", []


def _python_options(words: list[str]) -> list[str]:
    """The words after python's own options (`-u`, `-W ignore`, `-X dev`), from `-m`, `-c` or the script on."""
    while words and words[0].startswith("-") and words[0] not in ("-m", "-c", "-"):
        words = words[1 + (words[0] in ("-W", "-X")):]
    return words


def mode_of(launcher: str) -> str:
    """The mode a launcher (its module's name, as `Unwrapped.launcher`) stands for; "" for none."""
    return MODES.get(launcher, "")


def script_imports_determined(command: tuple[str, ...] | list[str], max_bytes: int = 4 << 20) -> bool:
    """Whether the script `command` runs (relative to the working directory, where the job's workers run it)
    imports `determined`; False when there is no such file to read here (a cluster's node may hold it)."""
    script = script_of(command)
    if not script:
        return False
    try:
        with open(script, "rb") as f:
            source = f.read(max_bytes + 1)
    except OSError:
        return False
    return len(source) <= max_bytes and imports_determined(source.decode("utf-8", errors="replace"))


def script_of(command: tuple[str, ...] | list[str]) -> str:
    """The Python script a command runs (`python3 -u train.py`, `train.py`), or "" (a module, other programs)."""
    words = list(command)
    if words and _PYTHON.match(os.path.basename(words[0])):
        words = _python_options(words[1:])
    return words[0] if words and words[0].endswith(".py") else ""


def imports_determined(source: str) -> bool:
    """Whether a script's source imports `determined` at its top level or in a function (its own launcher does)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "determined" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "determined":
            return True
    return False

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

from tfdist.errors import UserError

MODES = {"tensorflow": "mwms", "horovod": "horovod", "torch_distributed": "torch", "deepspeed": "torch",
         "wrap_rank": ""}
# Each launcher's options that take the next word (the command starts after them, or after `--`).
_VALUED = {
    "tensorflow": (),
    "horovod": ("--autohorovod-args", "--hostfile", "--trial"),
    "torch_distributed": ("--trial", "--nproc_per_node", "--nproc-per-node", "--nnodes", "--master_port",
                          "--master-port", "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_backend", "--rdzv-backend",
                          "--node_rank", "--node-rank", "--max_restarts", "--max-restarts"),
    "deepspeed": ("--trial", "--num_gpus", "--num_nodes", "--master_port", "--include", "--exclude", "--hostfile"),
    "wrap_rank": (),
}
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
    """The command an entrypoint runs and the mode its Determined launcher stands for (launchers may nest:
    `determined.launch.torch_distributed -- python3 -m determined.launch.wrap_rank 0 -- python3 x.py`)."""
    words = tuple(entrypoint)
    if len(words) == 1 and _TRIAL_CLASS.match(words[0]) and not os.path.exists(words[0]):
        raise LauncherError(f"entrypoint: {words[0]!r} is a Trial class: {_TRIAL_API}")
    found = _launcher_of(words)
    if found is None:
        return Unwrapped(words)
    name, rest = found
    command = _command_after(name, rest)
    inner = unwrap(command)
    mode = MODES[name] or inner.mode
    if MODES[name] and inner.mode and inner.mode != MODES[name]:
        raise LauncherError(f"entrypoint: determined.launch.{name} wraps {inner.launcher}; name one launcher")
    return Unwrapped(inner.command, mode, f"determined.launch.{name}")


def _launcher_of(words: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """("tensorflow", the words after it) for `python3 -m determined.launch.tensorflow ...`, else None."""
    if len(words) >= 3 and _PYTHON.match(os.path.basename(words[0])) and words[1] == "-m":
        module = words[2]
        if module.startswith("determined.launch."):
            name = module.removeprefix("determined.launch.")
            if name not in MODES:
                raise LauncherError(f"entrypoint: {module} is not one of Determined's launchers tfdist understands "
                                    f"({', '.join('determined.launch.' + n for n in MODES)})")
            return name, list(words[3:])
    return None


def _command_after(name: str, words: list[str]) -> tuple[str, ...]:
    if name == "wrap_rank":  # wrap_rank RANK [--no-redirect-stdio] -- COMMAND
        if "--" not in words:
            raise LauncherError("entrypoint: determined.launch.wrap_rank needs `RANK -- COMMAND`")
        return tuple(words[words.index("--") + 1:])
    if "--" in words:
        options, command = words[:words.index("--")], words[words.index("--") + 1:]
    else:
        options, i = [], 0
        while i < len(words) and words[i].startswith("-"):
            takes = words[i] in _VALUED[name] and "=" not in words[i]
            options += words[i:i + 1 + takes]
            i += 1 + takes
        command = words[i:]
    for i, option in enumerate(options):
        if option == "--trial" or option.startswith("--trial="):
            target = option.partition("=")[2] or (options[i + 1] if i + 1 < len(options) else "")
            raise LauncherError(f"entrypoint: determined.launch.{name} --trial {target}: a Trial class is "
                                f"{_TRIAL_API}")
    if not command:
        raise LauncherError(f"entrypoint: determined.launch.{name} wraps no command; give it after `--`, e.g. "
                            f"python3 -m determined.launch.{name} -- python3 train.py")
    return tuple(command)


def mode_of(launcher: str) -> str:
    """The mode a launcher (its module's name, as `Unwrapped.launcher`) stands for; "" for none."""
    return MODES.get(launcher.removeprefix("determined.launch."), "") if launcher else ""


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
        words = words[1:]
        while words and words[0].startswith("-") and words[0] not in ("-m", "-c", "-"):
            words = words[1 + (words[0] in ("-W", "-X")):]
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

"""The command lines of Determined's launchers (`python3 -m determined.launch.NAME ...`), parsed as Determined's
own `parse_args` parse them, in one place: the config reads an entrypoint with them before a job starts
(cluster/shared/determined_launchers.py) and the launcher modules a script starts itself at run time
(tfdist/compat/determined_api/determined/launch/). Pure; imports only tfdist's errors.

- tensorflow: `[--port PORT] [--] SCRIPT...`: what follows `--` is appended to the script;
- horovod, torch_distributed: `[OVERRIDES... --] ([--autohorovod] --trial TRIAL | SCRIPT...)`: before `--`, options
  for horovodrun or torch.distributed.run (tfdist places the processes itself: they are not used);
- deepspeed: `(--trial TRIAL | SCRIPT...)`;
- wrap_rank: `[--no-redirect-stdio] RANK [--] SCRIPT...`.
"""

from __future__ import annotations

import dataclasses

from tfdist.errors import UserError

PREFIX = "determined.launch."
LAUNCHERS = ("determined.launch.tensorflow", "determined.launch.horovod", "determined.launch.torch_distributed",
             "determined.launch.deepspeed", "determined.launch.wrap_rank")
_OVERRIDES_FIRST = LAUNCHERS[1:3]  # horovod's and torch_distributed's: [OVERRIDES... --] before the command


class LauncherArgsError(UserError, ValueError):
    """A launcher's command line Determined's parser would refuse too; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class LauncherArgs:
    script: tuple[str, ...]  # the command the launcher runs
    trial: str = ""  # --trial TRIAL: a Trial class (not offered by tfdist)
    rank: str = ""  # wrap_rank's RANK
    redirect: bool = True  # wrap_rank: mark each output line (False: --no-redirect-stdio)


def parse(name: str, args: list[str] | tuple[str, ...]) -> LauncherArgs:
    """`args` after `-m NAME` (a launcher's module: determined.launch.tensorflow, ...)."""
    if name not in LAUNCHERS:
        raise LauncherArgsError(f"{name} is not one of Determined's launchers tfdist understands "
                                f"({', '.join(LAUNCHERS)})")
    args = list(args)
    if name == "determined.launch.tensorflow":
        before, after = _split(args)
        before = _take_valued(before, "--port")
        return _script(name, before + after)
    if name == "determined.launch.wrap_rank":
        redirect = "--no-redirect-stdio" not in args[:2]
        rest = [a for a in args[:2] if a != "--no-redirect-stdio"] + args[2:]
        if not rest:
            raise LauncherArgsError(f"{name} needs RANK and a command: {name} RANK -- COMMAND")
        script = rest[1:]
        return dataclasses.replace(_script(name, script[1:] if script[:1] == ["--"] else script), rank=rest[0],
                                   redirect=redirect)
    if name in _OVERRIDES_FIRST:
        before, after = _split(args)
        args = after if "--" in args else before
    trial, args = _trial(args)
    if trial:
        if args:
            raise LauncherArgsError(f"{name}: extra arguments to --trial: {' '.join(args)}")
        return LauncherArgs((), trial)
    return _script(name, args[1:] if args[:1] == ["--"] else args)


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    if "--" not in args:
        return args, []
    return args[:args.index("--")], args[args.index("--") + 1:]


def _take_valued(args: list[str], option: str) -> list[str]:
    """Drops a leading `option VALUE` (or `option=VALUE`): tfdist chooses the ports."""
    if args[:1] and args[0].startswith(option + "="):
        return args[1:]
    if args[:1] == [option]:
        if len(args) < 2:
            raise LauncherArgsError(f"{option} needs a value")
        return args[2:]
    return args


def _trial(args: list[str]) -> tuple[str, list[str]]:
    """Leading --autohorovod and --trial TRIAL (as argparse reads options before the script)."""
    trial = ""
    while args and args[0] in ("--autohorovod", "--trial") or (args and args[0].startswith("--trial=")):
        head = args.pop(0)
        if head == "--trial":
            if not args:
                raise LauncherArgsError("--trial needs a Trial class")
            trial = args.pop(0)
        elif head.startswith("--trial="):
            trial = head.partition("=")[2]
    return trial, args


def _script(name: str, script: list[str]) -> LauncherArgs:
    if not script:
        raise LauncherArgsError(f"{name} wraps no command; give it after `--`, e.g. python3 -m {name} -- python3 "
                                "train.py")
    if script[0].startswith("-"):
        where = ", then `--`," if name in _OVERRIDES_FIRST else ""
        raise LauncherArgsError(f"{name}: unknown option {script[0]} (its own options go before the command{where}; "
                                "tfdist places the processes itself)")
    return LauncherArgs(tuple(script))

"""The `tfdist` command line. It maps argv onto the validated config and
hands over; user mistakes end in one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from cluster.config import DISTRIBUTION_MODES, ConfigError, ExperimentConfig, load_config
from cluster.local_launch import CommandError
from cluster.ports import PortError
from tfdist.batching import BatchSizeError

USAGE_ERROR = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdist", description="Distributed TensorFlow/Keras training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    launch = sub.add_parser("launch", help="run a training job", description=(
        "Run COMMAND as a distributed job: one worker process per slot, each with its TF_CONFIG "
        "and tfdist environment. `train.py ARGS` runs with this Python."))
    launch.add_argument("--config", metavar="FILE", help="experiment config (YAML)")
    launch.add_argument("--slots", type=_int, metavar="N", help="slots (workers); overrides resources.slots_per_trial")
    launch.add_argument("--distribution", metavar="MODE",
                        help=f"distribution mode ({', '.join(DISTRIBUTION_MODES)}); overrides distribution.mode")
    launch.add_argument("--startup-timeout", type=_positive_float, default=300.0, metavar="SECONDS",
                        help="stop the job if a worker has not joined by then (default 300)")
    launch.add_argument("entry", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the command each worker runs; default: the config's entrypoint")
    return parser


def _launch(args) -> int:
    from cluster.local_launch import launch_local

    config = load_config(args.config) if args.config else ExperimentConfig()
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    config = config.with_overrides(slots=args.slots, distribution=args.distribution, entrypoint=entry)
    if not config.entrypoint:
        raise UsageError("tfdist launch: no command to run; give one after `--` "
                         "(tfdist launch --slots 2 -- python train.py) or set `entrypoint` in --config")
    return launch_local(config, startup_timeout=args.startup_timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "launch":
            return _launch(args)
        parser.print_help()
        return USAGE_ERROR
    except (UsageError, ConfigError, BatchSizeError, PortError, CommandError) as e:
        sys.stderr.write(f"tfdist: error: {e}\n" if not str(e).startswith("tfdist") else f"{e}\n")
        return USAGE_ERROR


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

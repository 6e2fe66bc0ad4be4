"""The `tfdist` command line. It maps argv onto validated values and hands over to the command's handler
(the commands are a table: cluster/client/commands_table.py). Errors end here, in `main`, in one place:
a TfdistError (or an OSError: a file or socket) prints one line on stderr and exits with its code, never
a traceback: its own `exit_code` (2: the user's mistake, nothing started), or for a command that follows
a job docker-style codes (cluster/client/exit_codes.py: 125 tfdist's own failure). A reader of the output
that goes away ends it quietly (cluster/client/pipes.py)."""

from __future__ import annotations

import os

# Workers are started with fork+exec while gRPC threads run; gRPC's fork handlers are not
# needed for that and log a line per fork. Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# gRPC's C core logs each failed TLS handshake (a client that does not trust us, a port scan) at INFO on
# stderr; tfdist reports what matters in its own one line.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse
import logging
import sys
from typing import Sequence

from cluster.client import exit_codes, pipes
from cluster.client.commands_table import COMMANDS, Arg, OneOf
from cluster.client.usage import COORDINATOR_ENV, CREDENTIALS_ENV, UsageError  # noqa: F401 (the CLI's names)
from tfdist.errors import TfdistError

USAGE_ERROR = UsageError.exit_code
COMMAND_NAMES = frozenset(c.name for c in COMMANDS)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _add(parser, argument: Arg) -> None:
    options = dict(argument.options)
    if argument.default_from is not None:
        options["default"] = argument.default_from()
    parser.add_argument(*argument.flags, **options)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """One sub-parser per command of the table, its arguments added in the table's order. `only`: just that
    command's (argv names it: its parsing, errors and help are the same; building all 17 costs 8-12 ms of a
    local launch)."""
    parser = _Parser(prog="tfdist", description="Distributed TensorFlow/Keras training.")
    parser.add_argument("--version", action="store_true", help="print tfdist's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        if only is not None and command.name != only:
            continue
        command_parser = sub.add_parser(command.name, help=command.help, description=command.description)
        for item in command.args:
            if isinstance(item, OneOf):
                group = command_parser.add_mutually_exclusive_group()
                for argument in item.args:
                    _add(group, argument)
            else:
                _add(command_parser, item)
    return parser


def _report(error: BaseException, follows_job: bool) -> int:
    """The one line an error ends the command with, and its exit code."""
    message = str(error)
    try:
        sys.stderr.write(f"{message}\n" if message.startswith("tfdist") else f"tfdist: error: {message}\n")
        sys.stderr.flush()
    except BrokenPipeError:  # `2>&1 | head`: nobody reads it; the code still tells
        pipes.discard(sys.stderr)
    return exit_codes.of_error(error, follows_job)


def version() -> str:
    """The installed distribution's version (package metadata)."""
    from importlib import metadata

    try:
        return metadata.version("tfdist")
    except metadata.PackageNotFoundError:
        return "(unknown: not installed; pip install the checkout or a wheel)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pipes.keep_going(False)
    args, code = argparse.Namespace(follows_job=argv[:1] == ["launch"]), None
    try:
        parser = build_parser(argv[0] if argv and argv[0] in COMMAND_NAMES else None)
        sbatch_options = None
        if argv[:1] == ["launch"]:  # `--slurm OPTIONS`: sbatch's options, up to `--`
            from cluster.client.slurm_submit import split_argv

            argv, sbatch_options = split_argv(argv)
        args = parser.parse_args(argv, namespace=args)
        if args.version:
            print(f"tfdist {version()}")
            return 0
        if args.command is None:
            parser.print_help()
            return USAGE_ERROR
        if args.command == "launch":
            args.sbatch_options = sbatch_options
            exit_codes.follows_job(args)
        handler = next(c.handler for c in COMMANDS if c.name == args.command)
        code = handler(args)
        sys.stdout.flush()  # a closed pipe is found here, not by Python's flush at exit
        return code
    except BrokenPipeError:  # the reader went away (`| head`): as if it had read everything
        pipes.discard(sys.stdout)
        return code if code is not None else exit_codes.TFDIST_FAILED if args.follows_job else 0
    except KeyboardInterrupt:  # Ctrl-C outside a job's following (which cancels the job itself)
        sys.stderr.write("tfdist: interrupted\n")
        return exit_codes.CANCELED
    except (TfdistError, OSError) as e:  # each error carries its exit code; OSError: a file or socket
        return _report(e, args.follows_job)


def entry_point() -> None:
    pipes.install()  # before any command's module is imported (they may bind sys.stdout at import)
    code = main()
    # The command is over and closed what it opened (servers, stores, its workers): what is left is
    # Python's teardown of every module, 0.09-0.14 s of a local launch (issue 31). Flush what was written
    # and leave.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader gone, or a stream a command closed
            pipes.discard(stream)
    logging.shutdown()
    os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    entry_point()

"""The `tfdist` parsers come from one table: every command of it has its sub-parser, shared options are one
declaration, and defaults that read the environment read it when the parser is built."""

import argparse

import pytest

from cluster.client.cli import build_parser, main
from cluster.client.commands_table import CLIENT, COMMANDS, COORDINATOR, CREDENTIALS, JOB_ID, OneOf


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_command_of_the_table_and_only_those_has_a_parser():
    assert list(_subparsers(build_parser())) == [c.name for c in COMMANDS]
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)


def test_a_command_parsed_alone_has_the_same_parser_as_in_the_whole_table():
    """main() builds only the named command's parser (8-12 ms of a local launch): its help, usage and
    defaults are those of the same command in the whole table."""
    whole = _subparsers(build_parser())
    for command in COMMANDS:
        alone = _subparsers(build_parser(command.name))
        assert list(alone) == [command.name]
        assert alone[command.name].prog == whole[command.name].prog == f"tfdist {command.name}"
        assert alone[command.name].format_help() == whole[command.name].format_help()
        assert [(a.dest, a.default) for a in alone[command.name]._actions] == \
            [(a.dest, a.default) for a in whole[command.name]._actions]


def test_the_client_options_are_declared_once_and_reused():
    askers = [c for c in COMMANDS if c.name not in ("launch", "coordinator", "credentials", "kubernetes", "build-horovod")]
    for command in askers:
        assert command.args[:2] == CLIENT and command.args[0] is COORDINATOR and command.args[1] is CREDENTIALS
    with_id = [c.name for c in COMMANDS if JOB_ID in c.args]
    assert with_id == ["job", "logs", "cancel", "preempt", "resume", "metrics", "tensorboard"]


def test_defaults_from_the_environment_are_read_when_the_parser_is_built(monkeypatch):
    monkeypatch.setenv("TFDIST_COORDINATOR", "head:7470")
    monkeypatch.setenv("TFDIST_VERBOSITY", "debug")
    parsers = _subparsers(build_parser())
    assert parsers["jobs"].parse_args([]).coordinator == "head:7470"
    assert parsers["agent"].parse_args([]).verbosity == "debug"
    monkeypatch.delenv("TFDIST_COORDINATOR")
    assert _subparsers(build_parser())["jobs"].parse_args([]).coordinator is None


def test_exclusive_options_stay_exclusive(capsys):
    metrics = next(c for c in COMMANDS if c.name == "metrics")
    assert any(isinstance(a, OneOf) for a in metrics.args)
    assert main(["metrics", "--coordinator", "h:1", "7", "--json", "--csv"]) == 2
    assert capsys.readouterr().err == ("tfdist metrics: argument --csv: not allowed with argument --json "
                                       "(see `tfdist metrics --help`)\n")


@pytest.mark.parametrize("argv,message", [
    (["resume", "7"], "tfdist: error: job 7 is not one of your local runs (`tfdist jobs` lists them); no coordinator "
                      "given and none of yours runs on this machine: pass --coordinator HOST:PORT and --credentials "
                      "FILE (or set TFDIST_COORDINATOR and TFDIST_CREDENTIALS)\n"),
    (["experiment", "e7"], "tfdist: error: experiment e7 is not one of your local runs (`tfdist experiments` lists "
                           "them); no coordinator given and none of yours runs on this machine: pass --coordinator "
                           "HOST:PORT and --credentials FILE (or set TFDIST_COORDINATOR and TFDIST_CREDENTIALS)\n"),
    (["logs", "7", "--rank", "x"], "tfdist logs: argument --rank: expected an integer, got 'x' "
                                   "(see `tfdist logs --help`)\n"),
    (["logs", "7", "--slurm", "--json", "--rank", "1"],
     "tfdist logs: --slurm prints the Slurm job's output file as written, which has no ranks or streams for "
     "--json, --rank: drop them\n"),
    (["coordinator", "--state-dir", "s", "--port-range", "80-90"],
     "tfdist coordinator: argument --port-range: must satisfy 1024 <= LOW <= HIGH <= 65535, got 80-90 "
     "(see `tfdist coordinator --help`)\n"),
])
def test_a_user_mistake_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, argv, message):
    monkeypatch.delenv("TFDIST_COORDINATOR", raising=False)
    monkeypatch.setenv("TFDIST_RUNTIME_DIR", str(tmp_path / "runtime"))  # no coordinator of yours runs
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # and no local runs
    assert main(argv) == 2
    assert capsys.readouterr().err == message


def test_every_commands_handler_resolves_though_it_is_imported_only_when_run():
    """Handlers are imported when their command runs (commands_table._handler): a misspelt one would fail only
    then. Each must name a function that exists."""
    import importlib

    from cluster.client.commands_table import COMMANDS

    for command in COMMANDS:
        module, _, name = command.handler.__qualname__.rpartition(".")  # a package's module: image.command
        if not module:  # _dashboard: a function of commands_table itself
            continue  # a function of commands_table itself
        assert callable(getattr(importlib.import_module(f"cluster.client.{module}"), name)), command.name

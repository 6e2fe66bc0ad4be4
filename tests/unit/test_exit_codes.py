"""Issue 18, Measured 11: a worker's own argparse error exited 2 like tfdist's usage errors, and there was no
`tfdist --version`. `tfdist launch` now exits docker-style (125 tfdist's own failure, 126/127 the command, 75
paused, 130 canceled, else the job's root-cause worker's own code); other commands keep 2 and 1; docs/launch.md
lists every code."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from cluster.client import exit_codes
from cluster.client.cli import main
from cluster.client.usage import UsageError
from tests.conftest import REPO
from tfdist.errors import (CommandNotExecutableError, CommandNotFoundError, NotFoundError, UnavailableError,
                           UserError)


@pytest.mark.parametrize("state,recorded,code", [
    ("SUCCEEDED", -1, 0), ("FAILED", 13, 13), ("FAILED", 2, 2), ("FAILED", 137, 137), ("FAILED", 127, 127),
    ("FAILED", -1, 1), ("FAILED", 0, 1), ("CANCELED", -1, 130), ("PAUSED", -1, 75),
    ("QUEUED", -1, None), ("STARTING", -1, None), ("RUNNING", -1, None),
])
def test_a_jobs_code(state, recorded, code):
    assert exit_codes.of_job(state, recorded) == code


@pytest.mark.parametrize("error,other,following", [
    (UsageError("x"), 2, 125), (UserError("x"), 2, 125), (UnavailableError("x"), 1, 125), (NotFoundError("x"), 1, 125),
    (OSError("x"), 1, 125), (CommandNotFoundError("x"), 127, 127), (CommandNotExecutableError("x"), 126, 126),
])
def test_an_errors_code_for_other_commands_and_for_launch(error, other, following):
    assert (exit_codes.of_error(error, False), exit_codes.of_error(error, True)) == (other, following)


def test_a_worker_killed_by_a_signal_fails_the_job_with_128_plus_n():
    from cluster.coordinator.policy import worker_code

    assert [worker_code(c) for c in (-9, -15, 3, 255, 0, 300)] == [137, 143, 3, 255, 1, 1]


@pytest.mark.parametrize("argv,code,line", [
    (["launch", "--slots", "two", "--", "true"], 125,
     "tfdist launch: argument --slots: expected an integer, got 'two' (see `tfdist launch --help`)\n"),
    (["launch", "--slots", "2"], 125, "tfdist launch: no command to run; give one after `--` (tfdist launch --slots 2 "
                                      "-- python train.py) or set `entrypoint` in --config\n"),
    (["logs", "--rank", "x", "1"], 2, "tfdist logs: argument --rank: expected an integer, got 'x' "
                                      "(see `tfdist logs --help`)\n"),
])
def test_launchs_own_errors_are_125_others_keep_2(capsys, argv, code, line):
    assert main(argv) == code
    assert capsys.readouterr().err == line


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tfdist {metadata.version('tfdist')}\n"


def test_docs_list_every_exit_code():
    text = open(f"{REPO}/docs/launch.md").read()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)`", section, re.M))
    codes = {exit_codes.SUCCEEDED, exit_codes.PAUSED, exit_codes.TFDIST_FAILED, exit_codes.NOT_EXECUTABLE,
             exit_codes.NOT_FOUND, exit_codes.CANCELED}
    assert {str(c) for c in codes} | {"1", "128+N"} <= listed, listed


def test_a_missing_or_unrunnable_command_is_127_or_126_before_anything_starts(tmp_path):
    """Measured 11: a wrong script path exited 2 locally but 127 through a coordinator."""
    from cluster.shared.commands import resolve_command

    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    for command, code in (([str(script)], 126), (["python", "missing.py"], 127), (["no-such-program-xyz"], 127)):
        with pytest.raises(UserError) as raised:
            resolve_command(command, str(tmp_path))
        assert raised.value.exit_code == code and exit_codes.of_error(raised.value, True) == code, command

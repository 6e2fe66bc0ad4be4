"""User mistakes at the command line: one line naming the problem, no traceback, nothing started; exit 2, or
for `tfdist launch` 125 (tfdist refused: its other codes are the job's), 127 for a command not found."""

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("args,config,expected", [
    (["launch", "--config", "c.yaml", "--", "python", "-c", "pass"], "resources: {slot_per_trial: 2}\n",
     "tfdist: error: c.yaml: resources.slot_per_trial: unknown key; did you mean 'resources.slots_per_trial'?"),
    (["launch", "--config", "c.yaml", "--", "python", "-c", "pass"], "name: [\n",
     "tfdist: error: c.yaml:2:1: invalid YAML: expected the node content, but found '<stream end>'"),
    (["launch", "--config", "nope.yaml", "--", "python", "-c", "pass"], None,
     "tfdist: error: nope.yaml: cannot read config file: No such file or directory"),
    (["launch", "--slots", "0", "--", "python", "-c", "pass"], None,
     "tfdist: error: --slots: must be at least 1, got 0"),
    (["launch", "--slots", "two", "--", "python", "-c", "pass"], None,
     "tfdist launch: argument --slots: expected an integer, got 'two' (see `tfdist launch --help`)"),
    (["launch", "--distribution", "parameter_server", "--", "python", "-c", "pass"], None,
     "tfdist: error: --distribution: unknown value 'parameter_server'; expected one of auto, mwms, ps, horovod, mirrored, central_storage, one_device"),
    (["launch", "--slots", "2"], None,
     "tfdist launch: no command to run; give one after `--` (tfdist launch --slots 2 -- python train.py) "
     "or set `entrypoint` in --config"),
    (["launch", "--slots", "2", "--", "missing_script.py"], None,
     "tfdist: error: script 'missing_script.py' not found (relative to the current directory {cwd})"),
    (["launch", "--", "no-such-program-xyz"], None,
     "tfdist: error: program 'no-such-program-xyz' not found on PATH"),
    (["launch", "--config", "c.yaml", "--slots", "4", "--", "python", "-c", "pass"],
     "hyperparameters: {global_batch_size: 3}\n",
     "tfdist: error: hyperparameters.global_batch_size=3 is smaller than the 4 slots: every replica needs at "
     "least one sample. Use a global_batch_size of at least 4, or fewer slots."),
    (["launch", "--startup-timeout", "-1", "--", "python", "-c", "pass"], None,
     "tfdist launch: argument --startup-timeout: must be positive, got -1 (see `tfdist launch --help`)"),
    (["agent", "--coordinator", "127.0.0.1:1", "--name", "n1"], None,
     "tfdist agent: --credentials FILE is required: this node's credential, made on the coordinator's host with "
     "`tfdist credentials DIR --node n1` (or set TFDIST_CREDENTIALS)"),
    (["agent", "--coordinator", "127.0.0.1:1", "--credentials", "missing.json"], None,
     "tfdist: error: credential file missing.json does not exist; make one on the coordinator's host with "
     "`tfdist credentials DIR --user NAME` (or --node NAME)"),
    (["agent", "--coordinator", "127.0.0.1:1", "--slots", "0"], None,
     "tfdist agent: --slots must be at least 1, got 0"),
    (["lunch"], None,
     "tfdist: argument COMMAND: invalid choice: 'lunch' (choose from 'launch', 'coordinator', 'agent', 'credentials', 'jobs', "
     "'job', 'logs', 'cancel', 'preempt', 'resume', 'metrics', 'tensorboard', 'dashboard', 'agents', 'doctor', "
     "'build-horovod') "
     "(see "
     "`tfdist --help`)"),
])
def test_one_clear_line_and_exit_2(tmp_path, marker, args, config, expected):
    if config is not None:
        (tmp_path / "c.yaml").write_text(config)
    result = run_cli(args, marker, timeout=60, cwd=str(tmp_path))
    not_found = "not found" in expected and args[0] == "launch"
    assert result.returncode == (127 if not_found else 125 if args[0] == "launch" else 2)
    assert result.stderr == expected.format(cwd=tmp_path) + "\n"
    assert "Traceback" not in result.stdout + result.stderr


def test_help_lists_launch(marker):
    result = run_cli(["--help"], marker, timeout=60)
    assert result.returncode == 0 and "launch" in result.stdout

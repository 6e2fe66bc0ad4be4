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
     "tfdist: error: --distribution: unknown value 'parameter_server'; expected one of auto, mwms, ps, horovod, jax, torch, mirrored, central_storage, one_device, "
     "per_node"),
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
     "tfdist: error: credential file missing.json does not exist; an administrator issues one with "
     "`tfdist credentials --user NAME` (or --node NAME)"),
    (["agent", "--coordinator", "127.0.0.1:1", "--slots", "0"], None,
     "tfdist agent: --slots must be at least 1, got 0"),
    (["coordinator", "--listen", ":7474", "--state-dir", "state"], None,  # issue 30: "the address is in use"
     "tfdist: error: --listen ':7474' names no host: give 127.0.0.1:7474 (this machine only) or 0.0.0.0:7474 "
     "(every interface)"),
    (["coordinator", "--listen", "127.1:7475", "--state-dir", "state"], None,
     "tfdist: error: --listen '127.1:7475': 127.1 is not an IPv4 address written in full (gRPC reads no shorthand "
     "such as 127.1): give e.g. 127.0.0.1:7475 (this machine only) or 0.0.0.0:7475 (every interface)"),
    (["coordinator", "--listen", "127.0.0.1:99999", "--state-dir", "state"], None,  # it served on some port
     "tfdist: error: --listen '127.0.0.1:99999' is not HOST:PORT with a port from 0 to 65535 (got '99999'): give "
     "e.g. 127.0.0.1:7470 (this machine only) or 0.0.0.0:7470 (every interface)"),
    (["coordinator", "--listen", "127.0.0.1:0", "--state-dir", "c.yaml"], "a file, not a directory\n",
     "tfdist coordinator: --state-dir c.yaml is not a directory: give a directory (made if missing, mode 0700), "
     "e.g. ~/.tfdist/coordinator"),  # issue 30: it said "point TMPDIR elsewhere"
    (["coordinator", "--engine", "kubernets", "--state-dir", "state"], None,
     "tfdist: error: no engine named 'kubernets'; the engines are agents, kubernetes, local"),
    (["coordinator", "--engine", "kubernetes", "--state-dir", "state"], None,  # not in a pod, no --kubeconfig
     "tfdist: error: cannot read the Kubernetes credentials of the pod's ServiceAccount (in-cluster): [Errno 2] No "
     "such file or directory: '/var/run/secrets/kubernetes.io/serviceaccount/token'; outside the cluster pass "
     "--kubeconfig FILE"),
    (["coordinator", "--engine", "kubernetes", "--kubeconfig", "c.yaml", "--state-dir", "state"], "not: a kubeconfig\n",
     "tfdist: error: cannot read the Kubernetes credentials of --kubeconfig c.yaml: no 'clusters' in it (not a "
     "kubeconfig); give a kubeconfig file (`kubectl config view --raw --minify > FILE`)"),
    (["coordinator", "--engine", "kubernetes", "--node-selector", "pool", "--state-dir", "state"], None,
     "tfdist: error: --node-selector 'pool': 'pool' is not LABEL=VALUE; give e.g. pool=training"),
    (["coordinator", "--engine", "local", "--slots", "0", "--state-dir", "state"], None,
     "tfdist coordinator: --slots 0: give 1 to 65536 (the local engine's workers)"),
    (["lunch"], None,
     "tfdist: argument COMMAND: invalid choice: 'lunch' (choose from 'launch', 'coordinator', 'agent', 'credentials', 'kubernetes', "
     "'jobs', "
     "'job', 'logs', 'experiments', 'experiment', 'cancel', 'preempt', 'resume', 'metrics', 'tensorboard', 'dashboard', 'diagnose', 'agents', 'doctor', "
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


def test_a_credential_keeps_commands_off_slurm(monkeypatch, tmp_path):
    """A login node with Slurm configured: `tfdist jobs` alone asks Slurm, but a credential names a coordinator
    (the order of docs/cluster.md), and only --slurm sends such a command to Slurm."""
    import argparse

    from cluster.client.job_commands import on_slurm

    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    ask = lambda **given: on_slurm(argparse.Namespace(**{"coordinator": None, "credentials": None, "slurm": False,
                                                         **given}))
    assert ask() is True
    assert ask(credentials="user-alice.json") is False  # on main: Slurm answered
    assert ask(coordinator="10.0.0.1:7470") is False
    assert ask(credentials="user-alice.json", slurm=True) is True

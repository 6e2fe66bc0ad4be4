"""Determined's launchers in an entrypoint, as tfdist understands them before a job starts (pure)."""

import shlex

import pytest

from cluster.shared.determined_launchers import LauncherError, imports_determined, script_of, unwrap

# Every launcher form Determined's published configs and docs use, both generations.
UNWRAPPED = [
    ("python3 -m determined.launch.tensorflow -- python3 train.py", "python3 train.py", "mwms"),
    ("python3 -m determined.launch.tensorflow python3 train.py --epochs 3", "python3 train.py --epochs 3", "mwms"),
    ("python3 -m determined.launch.horovod --autohorovod -- python3 train.py", "python3 train.py", "horovod"),
    ("python3 -m determined.launch.horovod --autohorovod python3 train.py", "python3 train.py", "horovod"),
    ("python3 -m determined.launch.torch_distributed python3 train.py", "python3 train.py", "torch"),
    ("python3 -m determined.launch.torch_distributed --nproc_per_node 2 -- python3 train.py --x 1",
     "python3 train.py --x 1", "torch"),
    ("python3 -m determined.launch.deepspeed python3 script.py", "python3 script.py", "torch"),
    ("python3 -m determined.launch.wrap_rank 0 -- python3 worker.py", "python3 worker.py", ""),
    ("python3 -m determined.launch.torch_distributed -- python3 -m determined.launch.wrap_rank 0 -- python3 x.py",
     "python3 x.py", "torch"),
    ("python3 4_distributed.py launcher", "python3 4_distributed.py launcher", ""),
    # Determined's parsers: tensorflow's --port and what follows `--` appended; python's own options first;
    # wrap_rank outermost, the inner launcher's mode kept; wrap_rank without `--`.
    ("python3 -m determined.launch.tensorflow --port 2222 python3 t.py", "python3 t.py", "mwms"),
    ("python3 -m determined.launch.tensorflow python3 t.py -- --epochs 3", "python3 t.py --epochs 3", "mwms"),
    ("python3 -u -m determined.launch.torch_distributed python3 t.py", "python3 t.py", "torch"),
    ("python3 -m determined.launch.wrap_rank 0 -- python3 -m determined.launch.torch_distributed python3 t.py",
     "python3 t.py", "torch"),
    ("python3 -m determined.launch.wrap_rank --no-redirect-stdio 3 python3 t.py", "python3 t.py", ""),
    ("python3 train.py", "python3 train.py", ""),
]


@pytest.mark.parametrize("entrypoint,command,mode", UNWRAPPED)
def test_each_launcher_is_its_command_in_a_mode(entrypoint, command, mode):
    found = unwrap(shlex.split(entrypoint))
    assert found.command == tuple(shlex.split(command)) and found.mode == mode
    assert bool(found.launcher) == ("determined.launch" in entrypoint)


@pytest.mark.parametrize("entrypoint,named", [
    ("python3 -m determined.launch.horovod --autohorovod --trial model_def:IrisTrial", "model_def:IrisTrial"),
    ("python3 -m determined.launch.torch_distributed --trial model_def:MNistTrial", "model_def:MNistTrial"),
    ("python3 -m determined.launch.torch_distributed --trial=model_def:MNistTrial", "model_def:MNistTrial"),
    ("model_def:IrisTrial", "model_def:IrisTrial"),
    ("python3 -m determined.launch.tensorflow", "no command"),
    ("python3 -m determined.launch.tensorflow --", "no command"),
    ("python3 -m determined.launch.ray -- python3 x.py", "determined.launch.ray"),
    ("python3 -m determined.launch.tensorflow -- python3 -m determined.launch.horovod -- python3 x.py", "one launcher"),
    ("python3 -m determined.launch.torch_distributed --nproc_per_node 2 python3 t.py", "--nproc_per_node"),
    ("python3 -m determined.launch.horovod --trial model_def:T python3 x.py", "extra arguments"),
])
def test_what_tfdist_cannot_run_is_one_line_naming_it(entrypoint, named):
    with pytest.raises(LauncherError) as caught:
        unwrap(shlex.split(entrypoint))
    message = str(caught.value)
    assert named.split()[-1] in message or named in message
    assert "\n" not in message and message.startswith("entrypoint: ")


@pytest.mark.parametrize("command,script", [
    ("python3 train.py", "train.py"), ("python3 -u train.py --x", "train.py"), ("train.py", "train.py"),
    ("python -W ignore sub/x.py", "sub/x.py"), ("python3 -m pkg.mod", ""), ("./run.sh", ""), ("python3 -c 1", ""),
])
def test_the_script_a_command_runs(command, script):
    assert script_of(shlex.split(command)) == script


@pytest.mark.parametrize("source,imports", [
    ("import determined as det\n", True), ("import determined.keras\n", True),
    ("from determined import core\n", True), ("def f():\n    import determined\n", True),
    ("import tensorflow\n# import determined\n", False), ("s = 'import determined'\n", False),
    ("from .determined import x\n", False), ("import determinedx\n", False), ("this is not python(\n", False),
])
def test_whether_a_script_imports_determined(source, imports):
    assert imports_determined(source) is imports


def test_a_launchers_mode_reaches_the_launch_inside_a_slurm_allocation(tmp_path, monkeypatch):
    """`--slurm` hands the inner launch the unwrapped command after `--`: the launcher's mode goes with it."""
    import argparse

    from cluster.client.job_commands import slurm_mode
    from cluster.shared.config import parse_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "own.py").write_text("import determined\n")
    cases = {"python3 -m determined.launch.horovod --autohorovod -- python3 t.py": "horovod",
             "python3 own.py launcher": "per_node", "python3 t.py": None}
    for entrypoint, mode in cases.items():
        config = parse_config(f"entrypoint: {entrypoint}\n", "c.yaml")
        assert slurm_mode(argparse.Namespace(distribution=None), config) == mode, entrypoint
    assert slurm_mode(argparse.Namespace(distribution="mwms"), config) == "mwms"

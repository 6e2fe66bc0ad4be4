"""Installing where you train: the wheel `pip wheel --no-deps .` builds works outside the repository. It is
installed into a fresh venv (its dependencies seen through a .pth file naming this venv's site-packages, so
the test stays offline and fast), and from a directory outside the repository, with no PYTHONPATH: `tfdist
launch` runs a script on 2 workers with the wheel's worker start-up, `tfdist build-horovod` finds its script;
a coordinator and an agent from the wheel run a job, and `tfdist doctor` checks the node and the
coordinator with a user's credential. Nothing of tfdist is read from the checkout."""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from tests.conftest import MARKER_VAR, REPO, stop_processes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
FAKES = os.path.join(REPO, "tests", "fakes")
OWN_VENV = os.path.join(REPO, ".venv") + os.sep  # the dependencies' home: not tfdist's code

# Run by the workers and by the wheel's Python: what of tfdist was loaded, from where.
WHERE = """import os, sys
import tfdist, cluster.client.cli, cluster.agent.daemon, cluster.coordinator.daemon
repo = {repo!r}
from_repo = sorted(f for f in (getattr(m, "__file__", None) or "" for m in list(sys.modules.values()))
                   if f.startswith(repo + os.sep) and not f.startswith({own_venv!r}))
start_up = getattr(sys.modules.get("_tfdist_worker_startup"), "__file__", "")  # the environment's may be `sitecustomize`
print("rank", os.environ.get("TFDIST_RANK", "-"), "tfdist", tfdist.__file__, "start-up", start_up, "from-repo", from_repo)
"""


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A fresh venv with only the wheel installed in it (and a .pth to this venv's dependencies)."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"  # a copy: building writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), source / name)
    for package in ("cluster", "tfdist"):
        shutil.copytree(os.path.join(REPO, package), source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(base / "dist"), str(source)], capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((base / "dist").glob("tfdist-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
                                str(wheel)], capture_output=True, text=True, timeout=240)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    with open(os.path.join(site, "tfdist-test-dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")  # TensorFlow, grpc...: after the venv's own site
    return venv, wheel


def outside_env(venv, marker, **extra):
    """An activated venv outside the repository: its bin first on PATH, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv), MARKER_VAR: marker,
                "TF_CPP_MIN_LOG_LEVEL": "2", **extra})
    return env


def check_workers(output, site):
    """Both ranks ran tfdist and the worker start-up from the wheel, and nothing of tfdist from the checkout."""
    workers = [line for line in output.splitlines() if " rank " in line]
    assert len(workers) == 2, output
    for line in workers:
        fields = line.split()
        tfdist_file = fields[fields.index("tfdist") + 1]
        assert tfdist_file.startswith(site), line
        assert fields[fields.index("start-up") + 1] == os.path.join(os.path.dirname(tfdist_file), "compat", "bootstrap",
                                                                    "sitecustomize.py"), line
        assert line.endswith("from-repo []"), line


def test_the_wheel_launches_and_builds_horovod_outside_the_repository(wheel_venv, tmp_path, marker):
    venv, wheel = wheel_venv
    tfdist, site = str(venv / "bin" / "tfdist"), str(venv / "lib")
    (tmp_path / "train.py").write_text(WHERE.format(repo=REPO, own_venv=OWN_VENV))
    env = outside_env(venv, marker)

    launched = subprocess.run([tfdist, "launch", "--slots", "2", "--", "python", "train.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=180)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    check_workers(launched.stdout, site)
    launcher = subprocess.run([str(venv / "bin" / "python"), "train.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)  # the CLI's, coordinator's and agent's modules
    assert launcher.stdout.strip().endswith("from-repo []") and site in launcher.stdout, launcher

    assert subprocess.run([tfdist, "build-horovod", "--help"], cwd=tmp_path, env=env, capture_output=True,
                          timeout=60).returncode == 0
    checked = subprocess.run([tfdist, "build-horovod", "--check"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
    spec = importlib.util.find_spec("horovod")
    built = spec is not None and os.path.isfile(os.path.join(os.path.dirname(spec.origin), "TFDIST_BUILD"))
    assert checked.returncode == (0 if built else 1), checked.stdout + checked.stderr
    assert checked.stdout.startswith("horovod: ") and str(venv) in checked.stdout, checked.stdout


def test_a_cluster_from_the_wheel_and_its_doctor(wheel_venv, tmp_path, marker):
    """A coordinator and an agent from the wheel; doctor checks the node with a user's credential; the job
    runs through the coordinator with the wheel's worker start-up."""
    venv, wheel = wheel_venv
    tfdist, site = str(venv / "bin" / "tfdist"), str(venv / "lib")
    (tmp_path / "train.py").write_text(WHERE.format(repo=REPO, own_venv=OWN_VENV))
    env = outside_env(venv, marker)
    state, processes = tmp_path / "state", []
    try:
        coordinator = subprocess.Popen([tfdist, "coordinator", "--listen", "127.0.0.1:0", "--state-dir", str(state)],
                                       cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True,
                                       stderr=open(tmp_path / "coordinator.log", "w"))
        processes.append(coordinator)
        banner = coordinator.stdout.readline()
        assert " listening on " in banner, (tmp_path / "coordinator.log").read_text()
        address = banner.split(" listening on ")[1].split()[0]
        issued = subprocess.run([tfdist, "credentials", str(state / "credentials"), "--node", "n1", "--user", "u",
                                 "--coordinator", address], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert issued.returncode == 0, issued.stderr
        user = str(state / "credentials" / "issued" / "user-u.json")
        processes.append(subprocess.Popen(
            [tfdist, "agent", "--credentials", str(state / "credentials" / "issued" / "node-n1.json"), "--slots", "2"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "agent.log", "w")))

        # nvidia-smi lists 8 GPUs that this TensorFlow (tensorflow-cpu) cannot see: the one problem.
        doctor = subprocess.run([tfdist, "doctor", "--credentials", user, "--distribution", "mwms"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=240,
                                env={**env, "PATH": FAKES + os.pathsep + env["PATH"], "TFDIST_FAKE_GPUS": "8"})
        lines = doctor.stdout.splitlines()
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        assert [line.split()[1] for line in lines if line.startswith("problem")] == ["gpus:"], doctor.stdout
        assert "nvidia-smi lists 8, TensorFlow sees none" in doctor.stdout and "; fix: pip uninstall" in doctor.stdout
        python_line = next(line for line in lines if line.startswith("ok       python:"))
        assert f"tfdist from {site}" in python_line and "worker start-up present" in python_line, python_line
        assert any(line.startswith("ok       tensorflow:  2.21") for line in lines), doctor.stdout
        assert f"ok       coordinator: {address} answered in " in doctor.stdout, doctor.stdout
        assert f"accepted the user credential u ({user})" in doctor.stdout, doctor.stdout
        assert lines[-1] == "tfdist doctor: 1 problem; fix it before a long run"

        launched = subprocess.run([tfdist, "launch", "--credentials", user, "--slots", "2", "--", "python", "train.py"],
                                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert launched.returncode == 0, launched.stdout + launched.stderr + (tmp_path / "agent.log").read_text()
        check_workers(launched.stdout, site)
    finally:
        stop_processes(processes)

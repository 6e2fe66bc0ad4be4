"""Shared test helpers: run the real `tfdist` CLI and prove no process is left behind."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from hypothesis import HealthCheck, settings as hypothesis_settings

from tests.unit_tier import pytest_sessionfinish, pytest_sessionstart, pytest_terminal_summary  # noqa: F401 (hooks)

# Every property test: drawing its inputs slowly on a loaded machine (CI's 2 cores beside the suite) is no failure
# of the property (test_diagnosis failed so in a fresh-clone run), and no example has a time limit.
hypothesis_settings.register_profile("tfdist", suppress_health_check=[HealthCheck.too_slow], deadline=None)
hypothesis_settings.load_profile("tfdist")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER_VAR = "TFDIST_TEST_MARKER"
# JAX for the jax mode's workers, installed beside the venv (make test: `import tensorflow` would load it
# in every TensorFlow process otherwise): put on a worker's PYTHONPATH by the tests that run JAX.
JAX_SITE = os.path.join(sys.prefix, "jax-site")
WITH_JAX = {"PYTHONPATH": JAX_SITE}
# matplotlib, for `tfdist metrics --plot`, beside the venv for the same reason (Keras imports it when installed):
# the CLI runs that plot get it on their PYTHONPATH.
PLOT_SITE = os.path.join(sys.prefix, "plot-site")
WITH_PLOT = {"PYTHONPATH": os.pathsep.join([REPO, PLOT_SITE])}

# The longest modules (seconds of one module on one worker of `make test`, measured), started first: pytest-xdist
# hands each worker a whole module (--dist loadscope) in collection order, and in path order the Kubernetes,
# multi-host and Slurm modules, among the longest, came last, so the run ended with one or two workers busy
# on them and the others idle. Longest first, every worker finishes near the same time.
LONGEST_FIRST = (
    "tests/slurm/test_slurm.py",  # 356
    "tests/integration/test_launch_mwms.py",  # 296
    "tests/kubernetes/test_engine.py",  # 287
    "tests/kubernetes/test_real_node.py",  # 150 (the image cached; its first build and import add ~2 min)
    "tests/integration/test_restarts.py",  # 251
    "tests/multihost/test_cluster.py",  # 202
    "tests/multihost/test_diagnose.py",  # 136 (190-220 under load)
    "tests/integration/test_jax_torch.py",  # 166
    "tests/integration/test_horovod_mode.py",  # 157
    "tests/integration/test_ps_mode.py",  # 105
    "tests/integration/test_watchdog.py",  # 90
    "tests/slurm/test_slurm_experiments.py",  # 96
    "tests/integration/test_experiments.py",  # 84
    "tests/integration/test_liveness.py",  # 80
    "tests/integration/test_experiments_local.py",  # 66
    "tests/integration/test_diagnose.py",  # 55
    "tests/integration/test_failures.py",  # 63
    "tests/integration/test_local_runs.py",  # 63
    "tests/integration/test_cluster_cli.py",  # 60
)


def pytest_collection_modifyitems(config, items):
    """Modules in LONGEST_FIRST order, then the rest as collected; tests keep their order within a module."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def module_rank(item):
        path = os.path.relpath(str(item.path), REPO)
        return rank.get(path, len(rank))

    items.sort(key=module_rank)  # stable: the rest keep their collection order

# The credentials the coordinators of this test run publish for their user go to a private runtime dir of
# the run (what a user's ~/.tfdist/runtime is), not to the real one of whoever runs the tests. Local launches
# record their jobs under $XDG_STATE_HOME/tfdist: the test run's own, not the user's. Both are removed when the
# process that made them (pytest, or one Bazel test) exits; pytest-xdist's workers inherit them.
_RUN_DIRS: list[str] = []
if "TFDIST_RUNTIME_DIR" not in os.environ:
    os.environ["TFDIST_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tfdist-test-runtime-")
    _RUN_DIRS.append(os.environ["TFDIST_RUNTIME_DIR"])
if "TFDIST_TEST_STATE_HOME" not in os.environ:
    os.environ["TFDIST_TEST_STATE_HOME"] = os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tfdist-test-state-")
    _RUN_DIRS.append(os.environ["TFDIST_TEST_STATE_HOME"])
atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _RUN_DIRS])

# TFDIST_TEST_TIMELINE=FILE: one JSON line per test (its xdist worker, start and end, setup and teardown
# included), to see where a `make test` run's time went and which modules to start first (LONGEST_FIRST).
if os.environ.get("TFDIST_TEST_TIMELINE"):
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        start = time.time()
        yield
        with open(os.environ["TFDIST_TEST_TIMELINE"], "a") as timeline:
            timeline.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                                       "start": start, "end": time.time()}) + "\n")


def processes_whose(file: str, matches) -> list[int]:
    """PIDs (this one aside) whose /proc/PID/FILE (environ, cmdline) `matches(bytes)`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/{file}", "rb") as f:
                if matches(f.read()):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def processes_with_env(variable: bytes) -> list[int]:
    """PIDs whose environment holds `variable` (NAME=value)."""
    return processes_whose("environ", lambda text: variable in text.split(b"\0"))


def processes_with_marker(marker: str) -> list[int]:
    """PIDs whose environment carries `marker`: everything a test started, however deep."""
    return processes_with_env(f"{MARKER_VAR}={marker}".encode())


@pytest.fixture
def marker():
    """A unique marker for the processes a test starts; fails the test if any outlive it."""
    value = uuid.uuid4().hex
    yield value
    deadline = time.monotonic() + 15
    while (left := processes_with_marker(value)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def cli_env(marker: str, **extra) -> dict:
    env = dict(os.environ)
    env[MARKER_VAR] = marker
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def run_cli(args, marker, timeout=240, cwd=REPO, **extra_env) -> subprocess.CompletedProcess:
    """Runs `tfdist ARGS` as a real process, with a hard timeout."""
    return subprocess.run([sys.executable, "-m", "cluster.client.cli", *args], cwd=cwd, env=cli_env(marker, **extra_env),
                          capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, what, timeout=180, alive=lambda: True, logs=lambda: ""):
    """Waits for a condition (never for a fixed time); fails naming what did not happen, at once if
    `alive()` says the thing being waited on is gone."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while time.monotonic() < deadline:
        if predicate():
            return
        assert alive(), f"gave up waiting for {what}: the job ended"
        time.sleep(pause)
        # Looks become rarer, up to one a second: many predicates start a `tfdist` process (0.3-1 s of CPU
        # each); at five a second, the `job --json` and `agents --json` calls alone took 2 minutes of the suite's CPU.
        pause = min(1.0, pause * 1.5)
    raise AssertionError(f"timed out waiting for {what}{'; logs: ' + str(logs()) if logs() else ''}")


def stop_processes(procs) -> None:
    """SIGTERM to each process still running, then SIGKILL to any that has not exited 20 s later."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


FAKES = os.path.join(REPO, "tests", "fakes")  # a stand-in nvidia-smi for GPU nodes on CPU machines


class LocalCluster:
    """A real coordinator and real agents as processes on loopback (no TensorFlow needed)."""

    def __init__(self, tmp_path, marker, coordinator_args=(), state_dir=None, listen="127.0.0.1:0"):
        self.tmp, self.marker = tmp_path, marker
        self.state_dir = state_dir or str(tmp_path / "state")
        self.coordinator_args = list(coordinator_args)
        self.agents: dict[str, subprocess.Popen] = {}
        self.agent_args: dict[str, tuple] = {}
        self.coordinator = None
        self.address = None
        self._client = None
        self.start_coordinator(listen)

    def start_coordinator(self, listen):
        self._close_client()  # a restarted coordinator: the next look connects again
        self.coordinator = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", listen, "--state-dir", self.state_dir,
             "--subnet", "127.0.0.0/8", *self.coordinator_args], env=cli_env(self.marker), stdout=subprocess.PIPE,
            text=True, stderr=open(self.tmp / "coordinator.log", "a"))
        banner = self.coordinator.stdout.readline()  # "tfdist coordinator listening on 127.0.0.1:PORT (...)"
        assert " listening on " in banner, (self.tmp / "coordinator.log").read_text()
        self.address = banner.split(" listening on ")[1].split()[0]

    def node_credential(self, name) -> str:
        """A node credential for `name`, as `tfdist credentials STATE/credentials --node NAME` makes it."""
        from cluster.shared.credentials import Authority

        path = str(self.tmp / f"node-{name}.json")
        Authority.load(os.path.join(self.state_dir, "credentials")).issue("node", name).save(path)
        return path

    def start_agent(self, name, *args, env=None):
        self.agent_args[name] = (args, env)
        self.agents[name] = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "agent", "--coordinator", self.address, "--name", name,
             "--credentials", self.node_credential(name), *args],
            env=cli_env(self.marker, **(env or {})), stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"agent-{name}.log", "a"))
        return self.agents[name]

    def wait_for(self, predicate, what, timeout=60):
        wait_for(predicate, what, timeout, logs=self.logs)

    def wait_agents(self, *names):
        self.wait_for(lambda: {a["name"] for a in self.listed_agents() if a["state"] == "ALIVE"} >= set(names),
                      f"agents {names} to register")

    def logs(self):
        return {p.name: p.read_text()[-3000:] for p in self.tmp.glob("*.log")}

    @property
    def env(self):
        return {"TFDIST_COORDINATOR": self.address}

    def cli(self, *args, timeout=120, **env):
        return run_cli(list(args), self.marker, timeout=timeout, **self.env, **env)

    def json(self, *args):
        result = self.cli(args[0], "--json", *args[1:])
        assert result.returncode == 0, result.stderr
        import json
        return json.loads(result.stdout)

    # The looks tests poll with (a job's state, the agents), asked in this process: what `tfdist job ID --json`
    # and `tfdist agents --json` print, made by the same client call and the same document functions, without
    # a `tfdist` process each time (0.3 s of CPU apiece: 500 of them a suite). The CLI itself is tested as a
    # process where it is the subject (cli(), json()).
    def job(self, job_id):
        from cluster.client import json_output
        return json.loads(json_output.dumps(json_output.job(self.client().job(job_id))))

    def listed_agents(self) -> list[dict]:
        from cluster.client import json_output
        return json.loads(json_output.dumps(json_output.agents(self.client().list_agents())))["agents"]

    def client(self):
        """A client of this cluster's coordinator with its user's credential, as the CLI finds it."""
        if self._client is None:
            from cluster.shared.auth import find_credential
            from cluster.shared.rpc import Client

            self._client = Client(*find_credential(self.address, None))
        return self._client

    def _close_client(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self):
        self._close_client()
        stop_processes([self.coordinator, *self.agents.values()])


@pytest.fixture(scope="session")
def other_user_python():
    """A Python another local user (nobody) can run tfdist's code with: tests/other_user.py says why."""
    from tests.other_user import OtherUserPython

    python = OtherUserPython()
    yield python
    python.close()


@pytest.fixture
def local_cluster(tmp_path, marker):
    made = []

    def make(coordinator_args=()):
        cluster = LocalCluster(tmp_path, marker, coordinator_args)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()

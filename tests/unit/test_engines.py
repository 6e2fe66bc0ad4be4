"""The Engine seam (cluster/coordinator/engine.py): mypy holds every registered engine to the protocol and the
core to the host's; the job logic imports no engine; and the local engine runs a real job on a real
coordinator core (real SQLite, real processes), with no agent and no heartbeat from anything."""

from __future__ import annotations

import ast
import os
import pathlib
import sys
import textwrap
import time

import pytest

from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.values import Settings
from cluster.engines import ENGINES, create_engine
from cluster.engines.local import LocalOptions
from cluster.shared.model import JobState
from tests.conftest import wait_for
from tests.mypy_check import registry_errors
from tests.specs import flat_spec
from tfdist.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[2]
BROKEN_ENGINES = textwrap.dedent('''\
    import dataclasses

    from cluster.coordinator.core import CoordinatorCore
    from cluster.coordinator.engine import EngineHost, Front
    from cluster.coordinator.engine_host import CoreHost
    from cluster.engines import EngineKind


    @dataclasses.dataclass(frozen=True)
    class Options:
        pass


    class NeverCloses:
        name = "never_closes"

        def attach(self, host: EngineHost) -> None:
            pass


    class WantsTheCore:
        name = "wants_the_core"

        def serve(self, front: Front) -> None:
            pass

        def attach(self, host: CoordinatorCore, slots: int) -> None:
            pass

        def tick(self, now: float) -> None:
            pass

        def peer_addresses(self, job, nodes):
            return None

        def close(self, timeout: float) -> None:
            pass


    def the_core_s_host_is_a_host(core: CoordinatorCore) -> EngineHost:
        return CoreHost(core)


    def the_core_is_not(core: CoordinatorCore) -> EngineHost:
        return core


    def never_closes(options: Options) -> NeverCloses:
        return NeverCloses()


    def wants_the_core(options: Options) -> WantsTheCore:
        return WantsTheCore()


    NEVER_CLOSES = EngineKind("never_closes", "", Options, never_closes)
    WANTS_THE_CORE = EngineKind("wants_the_core", "", Options, wants_the_core)
    ''')


def test_mypy_holds_every_engine_and_the_core_s_host_to_the_contract_and_refuses_broken_ones(tmp_path):
    """Every registered engine's KIND type-checks against the contract (cluster/coordinator/engine.py); engines
    that break it, and the core handed over as a host (its tables stay behind CoreHost), do not."""
    errors = registry_errors(os.path.join("cluster", "engines"), BROKEN_ENGINES, tmp_path)
    assert len(errors) == 3 and errors[0].startswith('Incompatible return value type (got "CoordinatorCore", '
                                                     'expected "EngineHost")'), errors
    assert errors[1:] == [
        'Argument 4 to "EngineKind" has incompatible type "Callable[[Options], NeverCloses]"; expected '
        '"Callable[[Any], Engine]"  [arg-type]',
        'Argument 4 to "EngineKind" has incompatible type "Callable[[Options], WantsTheCore]"; expected '
        '"Callable[[Any], Engine]"  [arg-type]'], errors


def test_the_job_logic_imports_no_engine():
    """The coordinator's modules never import cluster.engines, anywhere in their bodies (the daemon's caller
    hands an engine over). tests/unit/test_layout.py holds every side to its imports; this is the seam's."""
    crossings = []
    for path in sorted((REPO / "cluster" / "coordinator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            crossings += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.startswith("cluster.engines")]
    assert not crossings and set(ENGINES) == {"agents", "kubernetes", "local"}, crossings


def test_an_engine_name_that_is_not_there_is_one_clear_error():
    with pytest.raises(UserError, match="no engine named 'kubernets'; the engines are agents, kubernetes, local"):
        create_engine("kubernets")


@pytest.fixture
def core(tmp_path):
    store = SqliteStore(str(tmp_path / "coordinator.sqlite"))
    core = CoordinatorCore(store, Settings(port_range=(23000, 23999)), now=time.time())
    yield core
    store.close()


def test_the_local_engine_runs_a_job_with_no_agent_and_is_never_lost(core, tmp_path, marker, monkeypatch):
    engine = create_engine("local", LocalOptions(slots=2))
    core.attach_engine(engine)
    try:
        script = "import os; print('rank', os.environ['TFDIST_RANK'], 'of', os.environ['TFDIST_SIZE'])"
        monkeypatch.setenv("TFDIST_TEST_MARKER", marker)  # the workers carry it: the marker fixture finds leftovers
        job_id, _ = core.submit(flat_spec((sys.executable, "-c", script), slots=2, working_dir=str(tmp_path)),
                                now=time.time())
        wait_for(lambda: core.store.job(job_id).state == JobState.SUCCEEDED, "the job to succeed", timeout=60,
                 logs=lambda: str(core.store.job(job_id)))
        texts = sorted(line.text for line in core.store.logs(job_id))
        assert texts == ["rank 0 of 2", "rank 1 of 2"], texts
        [node] = core.agents.values()
        assert node.name == "local" and not node.watched
        later = time.time() + 3600  # an hour of silence: the engine answers for its node
        engine.tick(later)
        core.host.check_silent(later)  # not even the watch for silent agents finds it silent
        core.check_deadlines(later)
        assert not node.lost
        wait_for(lambda: not core.allocs.all(), "the node to let the job go", timeout=30)
    finally:
        engine.close(timeout=10)


def test_closing_the_local_engine_starts_nothing_more(core, tmp_path, marker, monkeypatch):
    """close() stops the workers; their job fails and, with restarts left, is placed again at once: that run
    must not start behind the close (its workers would outlive it)."""
    engine = create_engine("local", LocalOptions(slots=1))
    core.attach_engine(engine)
    monkeypatch.setenv("TFDIST_TEST_MARKER", marker)
    script = "import time; print('up', flush=True); time.sleep(120)"
    job_id, _ = core.submit(flat_spec((sys.executable, "-c", script), slots=1, working_dir=str(tmp_path),
                                      max_restarts=5), now=time.time())
    wait_for(lambda: any(line.text == "up" for line in core.store.logs(job_id)), "the worker to start", timeout=60)
    engine.close(timeout=20)
    assert engine.runs.job_ids() == []
    job = core.store.job(job_id)
    assert job.restarts >= 1 and job.state in (JobState.QUEUED, JobState.STARTING), job


def test_the_documented_engine_skeleton_is_an_engine(tmp_path):
    """docs/development.md's skeleton passes mypy: its KIND holds its engine to the contract."""
    import subprocess

    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    code = text.split("# cluster/engines/mine/__init__.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mine.py").write_text(code)
    result = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                             "--no-error-summary", "--cache-dir", str(tmp_path / "mypy-cache"), str(tmp_path / "mine.py")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_coordinator_daemon_on_the_local_engine_runs_a_launch_with_no_agent(marker, tmp_path):
    """`tfdist coordinator --engine local --slots 2`: a launch on this machine finds it (the published
    credential) and its job runs on the coordinator's own machine; SIGTERM stops the daemon."""
    import select
    import signal
    import subprocess

    from tests.conftest import cli_env, run_cli

    env = {"TFDIST_RUNTIME_DIR": str(tmp_path / "run"), "XDG_STATE_HOME": str(tmp_path / "state")}
    daemon = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "coordinator", "--engine", "local",
                               "--slots", "2", "--listen", "127.0.0.1:0", "--http", "off",
                               "--state-dir", str(tmp_path / "coordinator")],
                              env=cli_env(marker, **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said = ""  # its log lines (stderr) and what it prints: wait, bounded, for the line naming its credential
        deadline = time.monotonic() + 60
        while "yours is " not in said or not said.endswith("\n"):
            assert time.monotonic() < deadline and daemon.poll() is None, said
            if select.select([daemon.stdout], [], [], 1.0)[0]:
                said += os.read(daemon.stdout.fileno(), 65536).decode()
        credential = said.split("yours is ", 1)[1].split(" ", 1)[0]  # the admin credential it published
        script = "import os; print('rank', os.environ['TFDIST_RANK'], 'of', os.environ['TFDIST_SIZE'])"
        done = run_cli(["launch", "--credentials", credential, "--slots", "2", "--all-ranks", "--", sys.executable,
                        "-c", script], marker, timeout=120, cwd=str(tmp_path), **env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "submitted to 127.0.0.1:" in done.stderr
        assert sorted(l for l in done.stdout.splitlines() if "rank" in l) == ["[rank=0] rank 0 of 2",
                                                                             "[rank=1] rank 1 of 2"], done.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0


def test_a_local_launch_s_slots_are_this_machine_s_first_gpus_when_it_has_as_many():
    from cluster.shared.gpus import slots_on_gpus
    from cluster.shared.model import Gpu

    found = [Gpu(i, f"GPU-{i}", "NVIDIA H200") for i in (2, 5, 7)]  # as CUDA_VISIBLE_DEVICES left them
    assert slots_on_gpus(2, found) == ((found[0], found[1]), None)
    assert slots_on_gpus(3, found) == (tuple(found), None)
    assert slots_on_gpus(4, []) == ((), None)  # a CPU machine: CPU slots, nothing to say
    assert slots_on_gpus(4, found) == ((), "--slots 4 is more than this machine's 3 GPUs: the workers run on CPU "
                                           "slots and see no GPU; --slots 3 or fewer trains on the GPUs")
    assert create_engine("local", LocalOptions(slots=2, gpus=(found[0], found[1])))._record().gpus == (found[0],
                                                                                                        found[1])

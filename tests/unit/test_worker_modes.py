"""Every distribution mode's worker side is a `WorkerMode` (tfdist/modes/): the type checker holds each
registered mode to the protocol, the registry has every mode the control plane can set, what each mode says
is what tfdist did before by name, and no module outside tfdist/modes/ names or compares a mode."""

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from cluster.shared.modes import PLANNERS
from tfdist import checkpointing, context_from_env
from tfdist.collectives import CollectiveError
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes import DEFAULT, WORKER_MODES, Unsupported, mode_of_env, startup, worker_mode
from tests.mypy_check import registry_errors

REPO = pathlib.Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO / "tfdist" / "compat" / "bootstrap"

# Two modes that break the protocol, registered the way tfdist/modes/__init__.py registers the real ones,
# and the context every mode is handed, which must be a `Process`.
BROKEN_MODES = textwrap.dedent('''\
    from typing import Any, Callable

    from tfdist.collectives import Collectives
    from tfdist.context import DistributedContext
    from tfdist.modes.base import Process, WorkerMode


    def what_a_mode_is_handed(ctx: DistributedContext) -> Process:
        return ctx


    class NoSaversSaid:
        name = "no_savers"
        every_rank_runs_script = True
        batch_callbacks = True

        def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
            raise NotImplementedError

        def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
            raise NotImplementedError

        def make_strategy(self, ctx: Process) -> object:
            raise NotImplementedError

        def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
            raise NotImplementedError


    class StrategyWithoutContext(NoSaversSaid):
        every_rank_saves = True

        def make_strategy(self) -> object:  # type: ignore[override]
            raise NotImplementedError


    REGISTRY: dict[str, WorkerMode] = {"no_savers": NoSaversSaid(), "no_context": StrategyWithoutContext()}
    ''')


def test_mypy_holds_every_registered_mode_to_the_protocol_and_refuses_a_broken_one(tmp_path):
    """One mypy run over tfdist/modes (must be clean) and a module of broken modes (must not be): the second
    half proves the first can fail."""
    assert registry_errors(os.path.join("tfdist", "modes"), BROKEN_MODES, tmp_path) == [
        'Dict entry 0 has incompatible type "str": "NoSaversSaid"; expected "str": "WorkerMode"  [dict-item]',
        'Dict entry 1 has incompatible type "str": "StrategyWithoutContext"; expected "str": "WorkerMode"  '
        '[dict-item]']


def test_the_registry_has_every_mode_the_control_plane_can_set_under_its_name():
    assert set(WORKER_MODES) == set(PLANNERS)  # `auto` is decided into one of these before any worker starts
    assert all(mode.name == name for name, mode in WORKER_MODES.items())
    assert DEFAULT == "mwms" and mode_of_env({}) is WORKER_MODES["mwms"]
    assert mode_of_env({"TFDIST_DISTRIBUTION": "ps"}) is WORKER_MODES["ps"]
    assert set(startup.STARTUP) <= set(WORKER_MODES)  # start-up steps only for modes that exist


def test_each_mode_declares_what_differs():
    """(every rank runs the script, every rank saves, batch callbacks run): what tfdist decided by name."""
    assert {n: (m.every_rank_runs_script, m.every_rank_saves, m.batch_callbacks) for n, m in WORKER_MODES.items()} \
        == {"mwms": (True, True, True),
            "ps": (False, False, False),
            "horovod": (True, False, True),
            "mirrored": (True, True, True),
            "central_storage": (True, True, True),
            "one_device": (True, True, True),
            "per_node": (True, False, True),  # the chief alone writes tfdist's checkpoints
            "jax": (True, True, True),
            "torch": (True, False, True)}
    assert [n for n, m in WORKER_MODES.items() if m.starts_own_workers] == ["per_node"]


def test_a_name_no_mode_has_runs_one_process_and_refuses_a_job():
    mode = worker_mode("nccl_magic")
    assert isinstance(mode, Unsupported) and mode.name == "nccl_magic"
    assert (mode.every_rank_runs_script, mode.every_rank_saves, mode.batch_callbacks) == (True, True, True)
    ctx = context_from_env({"TFDIST_RANK": "1", "TFDIST_SIZE": "2", "TFDIST_DISTRIBUTION": "nccl_magic"})
    with pytest.raises(LaunchEnvironmentError, match=r"^distribution mode 'nccl_magic' is not supported by this "
                                                     r"tfdist$"):
        mode.join(ctx, lambda: None)


def test_ps_collectives_are_refused_in_the_modes_words():
    ctx = context_from_env({"TFDIST_RANK": "0", "TFDIST_SIZE": "4", "TFDIST_DISTRIBUTION": "ps",
                            "TFDIST_STORE": "127.0.0.1:9"})
    with pytest.raises(CollectiveError, match=r"^ctx.allgather\(\) needs every rank to call it, but in ps mode only "
                                              r"the chief runs your script \(worker and ps tasks serve the chief "
                                              r"inside tfdist.init\(\)\)$"):
        ctx.allgather(1)
    assert context_from_env({"TFDIST_DISTRIBUTION": "ps"}).allgather(1) == [1]  # size 1 returns at once


class _Written:
    """A stand-in for tf.train.Checkpoint: where `write` was asked to write."""

    def __init__(self):
        self.paths = []

    def write(self, path):
        self.paths.append(path)
        return path


@pytest.mark.parametrize("mode,writes", [("mwms", True), ("mirrored", True), ("horovod", False), ("ps", False)])
def test_a_non_chief_writes_a_checkpoint_only_where_its_mode_has_every_rank_save(mode, writes, tmp_path):
    ctx = context_from_env({"TFDIST_RANK": "1", "TFDIST_SIZE": "2", "TFDIST_DISTRIBUTION": mode})
    written = _Written()
    assert checkpointing.save_checkpoint(written, 3, ctx, directory=str(tmp_path)) is None
    assert len(written.paths) == (1 if writes else 0)
    assert not any(p.startswith(str(tmp_path)) for p in written.paths)  # a scratch copy, never the chief's place


def test_horovod_and_single_node_modes_aggregate_with_keras_accumulation():
    class Optimizer:
        gradient_accumulation_steps = None

    for name in ("horovod", "ps", "mirrored", "central_storage", "one_device"):
        optimizer = Optimizer()
        WORKER_MODES[name].aggregate_gradients(optimizer, 4)
        assert optimizer.gradient_accumulation_steps == 4, name


# ---------------------------------------------------------------- mode names stay inside tfdist/modes/

def mode_branches(source: str, names) -> list[str]:
    """Where `source` holds a mode's name as a string, or compares or indexes by the distribution mode."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{node.lineno}: the mode name {node.value!r}")
        elif isinstance(node, (ast.Compare, ast.Subscript)) and _reads_the_mode(node):
            found.append(f"{node.lineno}: a {type(node).__name__.lower()} on the distribution mode")
    return found


def _reads_the_mode(node: ast.AST) -> bool:
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute) and part.attr in ("distribution", "DISTRIBUTION"):
            return True
        if isinstance(part, ast.Name) and part.id == "DISTRIBUTION":
            return True
        if isinstance(part, ast.Constant) and part.value == "TFDIST_DISTRIBUTION":
            return True
    return False


def test_the_check_finds_branching_by_mode_name():
    """Guards the guard: each way a mode name crept in before is found."""
    source = textwrap.dedent('''\
        if ctx.distribution in ("horovod", "ps"):
            pass
        peers = os.environ.get(envvars.DISTRIBUTION) != PS
        if mode == "mwms":
            pass
        strategy = STRATEGIES[ctx.distribution]
        refused = os.environ.get("TFDIST_DISTRIBUTION", "") == other
        ''')
    assert sorted(mode_branches(source, set(WORKER_MODES))) == [
        "1: a compare on the distribution mode", "1: the mode name 'horovod'", "1: the mode name 'ps'",
        "3: a compare on the distribution mode", "4: the mode name 'mwms'", "6: a subscript on the distribution mode",
        "7: a compare on the distribution mode"]


def test_no_module_outside_tfdist_modes_names_or_compares_a_mode():
    """What a mode means is asked of it (worker_mode(ctx.distribution)); a name compared anywhere else is a
    branch a new mode would have to find."""
    modes_dir = REPO / "tfdist" / "modes"
    found = []
    for path in sorted((REPO / "tfdist").rglob("*.py")):
        if modes_dir in path.parents:
            continue
        found += [f"{path.relative_to(REPO)}:{where}" for where in
                  mode_branches(path.read_text(encoding="utf-8"), set(WORKER_MODES))]
    assert not found, "ask the mode (tfdist/modes/) instead:\n" + "\n".join(found)


# ---------------------------------------------------------------- a worker's start-up asks the mode's entry

def _start_up(mode: str, code: str, **env: str) -> subprocess.CompletedProcess:
    """A Python started as the agent starts a worker: tfdist's bootstrap first on PYTHONPATH."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TFDIST_")}
    child_env.update(PYTHONPATH=str(BOOTSTRAP), TFDIST_DISTRIBUTION=mode, **env)
    return subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=60)


HOOKS = ("import sys; print(sorted(getattr(f, '_name', type(f).__name__) for f in sys.meta_path "
         "if type(f).__module__ == 'sitecustomize'), 'tfdist' in sys.modules)")


@pytest.mark.parametrize("mode,patch,hooks", [
    ("ps", "0", ["keras"]),  # a refusal, not a patch: kept with TFDIST_KERAS_PATCH=0
    ("mwms", "0", []),
    ("horovod", "1", ["_MissingPackage", "horovod.tensorflow", "keras"]),
    ("mwms", "1", ["keras"]),
])
def test_the_bootstrap_adds_what_the_modes_startup_entry_says_and_imports_no_tfdist(mode, patch, hooks):
    result = _start_up(mode, HOOKS, TFDIST_KERAS_PATCH=patch)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{hooks} False"


def test_a_missing_horovod_in_horovod_mode_names_the_command_that_installs_it():
    code = ("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n"
            "try:\n    import horovod\nexcept ModuleNotFoundError as e:\n    print(e)")
    result = _start_up("horovod", code)
    assert result.stdout.strip() == (
        f"No module named 'horovod': Horovod is not installed for {sys.executable}; run `tfdist build-horovod` "
        "(it builds horovod 0.28.1 for this TensorFlow, Gloo only; `make horovod` in a checkout)"), result.stderr
    assert _start_up("mwms", code).stdout.strip() == "No module named 'horovod'"


NEW_MODE = textwrap.dedent('''
    import sys
    import tfdist
    from tfdist import modes
    from tfdist.collectives import Collectives

    class Jaxish:
        """A mode that is not TensorFlow: one module, one registry line, nothing else touched."""
        name = "jaxish"
        every_rank_runs_script = True
        every_rank_saves = False
        batch_callbacks = True

        def collectives(self, store, rank, size):
            return Collectives(store, rank, size, self.name)

        def join(self, ctx, signal_ready):
            return self.make_strategy(ctx)

        def make_strategy(self, ctx):
            return {"framework": "jaxish", "process_id": ctx.rank, "num_processes": ctx.size}

        def aggregate_gradients(self, optimizer, steps):
            optimizer.accumulate_every = steps  # the toy's own way; a real mode wraps the optimizer's update

    modes.WORKER_MODES["jaxish"] = Jaxish()
    ctx = tfdist.init()
    assert ctx.strategy == {"framework": "jaxish", "process_id": 1, "num_processes": 2}, ctx.strategy
    assert tfdist.save_checkpoint.__module__ == "tfdist.checkpointing"
    print("tensorflow" in sys.modules, ctx.rank, ctx.size, ctx.is_chief)
''')


def test_a_mode_that_is_not_tensorflow_is_one_module_and_one_registry_line(tmp_path):
    """What issue 31 asks of the worker side: a mode's knowledge in one place, and a non-TensorFlow mode added
    without touching the others. A real worker process registers it, joins through tfdist.init() and gets
    the mode's own strategy object; TensorFlow is never imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TFDIST_DISTRIBUTION="jaxish", TFDIST_RANK="1", TFDIST_SIZE="2",
               TFDIST_READY_FILE=str(tmp_path / "ready"))
    env.pop("TF_CONFIG", None)
    result = subprocess.run([sys.executable, "-c", NEW_MODE], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "1", "2", "False"]
    assert (tmp_path / "ready").exists()  # init() told the launcher it joined, as in every mode

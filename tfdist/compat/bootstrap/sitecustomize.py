"""Put first on a worker's PYTHONPATH by tfdist's agent, so that scripts which never import tfdist get
tfdist's compatibility fixes too, each applied when the module it fixes finishes importing:
- `keras`: the Keras 3 `fit` fix under MultiWorkerMirroredStrategy (TensorFlow's own MWMS tutorials read
  TF_CONFIG themselves), and in ps mode the refusal of Keras 3 variables under parameter servers;
- `horovod.tensorflow`: Keras 3 variables accepted by the gradient tape and the broadcast (horovod#4290);
- in horovod mode, a missing Horovod is one line naming the command that installs it (jax and torch: theirs);
- in jax and torch modes, the framework's rendezvous (`jax.distributed.initialize`, `init_process_group`)
  tells the agent the worker joined, and a `jax.distributed.initialize()` without arguments finds the job;
- SIGUSR1 prints every thread's Python stack (faulthandler), for the step watchdog;
- `keras` and `tf_keras`: `fit` reports its step progress to the step watchdog (compat/keras_progress.py);
- `import determined` finds tfdist's implementation of Determined's worker API (compat/determined_api), last on
  sys.path so that a real `determined` installed in the worker's Python is never shadowed.
Nothing else is imported at start-up. TFDIST_KERAS_PATCH=0 turns the fixes off (not the ps refusal nor the progress
reports). An environment's own sitecustomize still runs. What a mode adds (the ps refusal, Horovod's fix and
its missing-package line) is the mode's entry in tfdist/modes/startup.py, read here by path.
"""

import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _startup_of_mode():
    """The start-up steps of this worker's mode (tfdist/modes/startup.py, loaded by its path: importing the
    tfdist package here would slow every worker's start)."""
    path = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "modes", "startup.py")
    spec = importlib.util.spec_from_file_location("_tfdist_mode_startup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.startup_of(os.environ.get("TFDIST_DISTRIBUTION", ""))


_STARTUP = _startup_of_mode()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of `name` to call `fix(module)` once it has loaded.
    It stays until the module has actually loaded: TensorFlow probes with `find_spec("keras")` first."""

    def __init__(self, name, fix):
        self._name, self._fix, self._looking = name, fix, False

    def find_spec(self, name, path=None, target=None):
        if name != self._name or self._looking:
            return None
        self._looking = True  # the look-up below must not come back here
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        upstream, finder = spec.loader.exec_module, self

        def exec_module(module):
            upstream(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            try:
                finder._fix(module)
            except Exception as e:  # never break the user's import; say why the fix is missing
                sys.stderr.write(f"tfdist: the fix for {name} was not applied: {type(e).__name__}: {e}\n")

        spec.loader.exec_module = exec_module
        return spec


class _MissingPackage(importlib.abc.MetaPathFinder):
    """Last on the path where the mode needs a package: its `import` that nothing else found fails with the fix."""

    def __init__(self, package, why):
        self._package, self._why = package, why

    def find_spec(self, name, path=None, target=None):
        if name == self._package:
            raise ModuleNotFoundError(f"No module named '{name}': {self._why.format(python=sys.executable)}",
                                      name=name)
        return None


_PATCH = os.environ.get("TFDIST_KERAS_PATCH", "1") != "0"


_PROGRESS = bool(os.environ.get("TFDIST_PROGRESS_FILE"))  # launched by tfdist: the step watchdog reads it


def _fix_keras(module):
    if _PATCH:
        from tfdist.compat import keras_mwms

        keras_mwms.apply()
    if _STARTUP.refuse_keras_3:  # a refusal, not a patch: TFDIST_KERAS_PATCH does not turn it off
        from tfdist.compat import keras_ps

        keras_ps.apply()
    if _PROGRESS:
        _report_fit_progress(module)


def _report_fit_progress(module):
    from tfdist.compat import keras_progress

    keras_progress.apply_module(module)


def _fix_horovod(module):
    from tfdist.compat import keras_horovod

    keras_horovod.apply(module)


def _after_rendezvous(module):
    from tfdist.compat import rendezvous

    if _STARTUP.jax_cluster:
        from tfdist.compat import jax_cluster

        jax_cluster.register()
    then = None
    if _STARTUP.torch_exit:
        from tfdist.compat import torch_exit

        then = torch_exit.after_init
    rendezvous.ready_after(module, _STARTUP.ready_after[1], then)


STARTUP_MODULE = "_tfdist_worker_startup"  # this module's name in sys.modules whatever `sitecustomize` names


def _chain_to_the_environments_own() -> None:
    """Runs the environment's own sitecustomize too (Debian's Python has one: apport's hook), which then keeps
    the name; this start-up stays in sys.modules as STARTUP_MODULE."""
    mine = sys.modules.pop("sitecustomize", None)
    if mine is not None:
        sys.modules[STARTUP_MODULE] = mine
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        import sitecustomize  # noqa: F401  (the environment's, if it has one)
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


if (_PATCH or _STARTUP.refuse_keras_3 or _PROGRESS) and "keras" not in sys.modules:
    sys.meta_path.insert(0, _AfterImport("keras", _fix_keras))
if _PROGRESS and "tf_keras" not in sys.modules:
    sys.meta_path.insert(0, _AfterImport("tf_keras", _report_fit_progress))
if _PATCH and _STARTUP.fix_horovod and "horovod.tensorflow" not in sys.modules:
    sys.meta_path.insert(0, _AfterImport("horovod.tensorflow", _fix_horovod))
if _STARTUP.ready_after and os.environ.get("TFDIST_SIZE") == "1" and os.environ.get("TFDIST_READY_FILE"):
    # One process: nothing to meet, and a script may skip its rendezvous when alone (`if world_size > 1:`).
    with open(os.environ["TFDIST_READY_FILE"], "w") as _ready:
        _ready.write(str(os.getpid()))
if _STARTUP.ready_after and _STARTUP.ready_after[0] not in sys.modules:
    sys.meta_path.insert(0, _AfterImport(_STARTUP.ready_after[0], _after_rendezvous))
if _STARTUP.explain_missing:
    sys.meta_path.append(_MissingPackage(*_STARTUP.explain_missing))
if _PROGRESS:
    # The step watchdog asks a stalled job's workers for their stacks with SIGUSR1 (into the job's logs).
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
_chain_to_the_environments_own()
sys.path.append(os.path.join(os.path.dirname(_HERE), "determined_api"))  # after site-packages: never shadows

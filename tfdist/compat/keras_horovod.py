"""Lets `horovod.tensorflow` 0.28.1 take Keras 3 variables (horovod#4290), so Horovod scripts written
for TF2 run unchanged on Keras 3: `DistributedGradientTape` (its `gradient` and the local sources of
`PartialDistributedGradientTape`) and `broadcast_variables` get the TensorFlow variables behind Keras 3
variables, and a Keras 3 optimizer's `variables` (a list there, a
method in Keras 2: Horovod's examples call `opt.variables()`) is a list that can also be called. Horovod's
Keras API (`horovod.tensorflow.keras`, `horovod.keras`) gets its own fixes when it loads
(tfdist/compat/horovod_keras_api.py). Applied by tfdist's worker start-up when `horovod.tensorflow`
loads, and by `import_horovod()` (so by `tfdist.init()` in horovod mode and by tfdist.horovod);
TFDIST_KERAS_PATCH=0 turns it off."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

from tfdist.compat import HOROVOD_INSTALL_HINT
from tfdist.compat.keras_variables import CallableList, tf_variable
from tfdist.errors import LaunchEnvironmentError

_applied = False


def import_horovod():
    """`horovod.tensorflow` with this fix applied, or one clear error naming the command that installs it."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise LaunchEnvironmentError(f"Horovod is not installed for {sys.executable} ({e}); "
                                     f"{HOROVOD_INSTALL_HINT}") from None
    apply(hvd)
    return hvd


def apply(hvd) -> bool:
    global _applied
    if _applied:
        return True
    if os.environ.get("TFDIST_KERAS_PATCH", "1") == "0":
        return False
    tape_class = hvd._DistributedGradientTape  # hvd.DistributedGradientTape copies its methods per call
    gradient, broadcast = tape_class.gradient, hvd.broadcast_variables

    def gradient_of_tf_variables(self, target, sources, *args, **kwargs):
        if isinstance(sources, (list, tuple)):
            sources = type(sources)(tf_variable(v) for v in sources)
        else:
            sources = tf_variable(sources)
        return gradient(self, target, sources, *args, **kwargs)

    def broadcast_tf_variables(variables, root_rank, *args, **kwargs):
        return broadcast([tf_variable(v) for v in variables], root_rank, *args, **kwargs)

    register_local_source = tape_class.register_local_source  # PartialDistributedGradientTape's local layers

    def register_local_tf_variable(self, source):
        return register_local_source(self, tf_variable(source))

    tape_class.gradient = gradient_of_tf_variables
    tape_class.register_local_source = register_local_tf_variable
    hvd.broadcast_variables = broadcast_tf_variables
    import horovod.tensorflow.functions as functions

    functions.broadcast_variables = broadcast_tf_variables
    _callable_optimizer_variables()
    _fix_keras_api_when_loaded()
    _applied = True
    return True


def _callable_optimizer_variables() -> None:
    """Keras 3 optimizers' `variables` property returns a CallableList (Keras iterates it as before)."""
    from tfdist.compat import tf_keras_logs

    if tf_keras_logs.in_use():  # tf_keras: Horovod supports its optimizers as they are
        return
    from keras.src.optimizers import base_optimizer, loss_scale_optimizer

    for cls in (base_optimizer.BaseOptimizer, loss_scale_optimizer.LossScaleOptimizer):
        found = cls.__dict__.get("variables")
        if isinstance(found, property) and not getattr(found.fget, "_tfdist_callable", False):
            def variables(self, _get=found.fget):
                return CallableList(_get(self))

            variables._tfdist_callable = True
            setattr(cls, "variables", property(variables, doc=found.__doc__))


KERAS_API_MODULES = ("horovod.tensorflow.keras", "horovod.keras")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of each of `names` to call `fix(module)` once it has loaded."""

    def __init__(self, names, fix):
        self._names, self._fix, self._looking = set(names), fix, False

    def find_spec(self, name, path=None, target=None):
        if name not in self._names or self._looking:
            return None
        self._looking = True  # the look-up below must not come back here
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self._names.discard(name)
        if not self._names and self in sys.meta_path:
            sys.meta_path.remove(self)
        upstream, fix = spec.loader.exec_module, self._fix

        def exec_module(module):
            upstream(module)
            try:
                fix(module)
            except Exception as e:  # never break the user's import; say why the fix is missing
                sys.stderr.write(f"tfdist: the fix for {name} was not applied: {type(e).__name__}: {e}\n")

        spec.loader.exec_module = exec_module
        return spec


def _fix_keras_api_when_loaded() -> None:
    from tfdist.compat import horovod_keras_api

    waiting = [name for name in KERAS_API_MODULES if name not in sys.modules]
    for name in KERAS_API_MODULES:
        if name in sys.modules:
            horovod_keras_api.apply(sys.modules[name])
    if waiting:
        sys.meta_path.insert(0, _AfterImport(waiting, horovod_keras_api.apply))

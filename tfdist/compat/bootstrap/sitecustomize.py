"""Put first on a worker's PYTHONPATH by tfdist's agent, so that scripts which never import tfdist
(TensorFlow's own MultiWorkerMirroredStrategy tutorials, which read TF_CONFIG themselves) get the
Keras 3 `fit` fix too: when `keras` finishes importing, tfdist's patch is applied. Nothing else is
imported at start-up. TFDIST_KERAS_PATCH=0 turns it off. An environment's own sitecustomize still runs.
"""

import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of `keras` to apply the fix once it has loaded.
    It stays until keras has actually loaded: TensorFlow probes with `find_spec("keras")` first."""

    def __init__(self):
        self._looking = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or self._looking:
            return None
        self._looking = True  # the look-up below must not come back here
        try:
            spec = importlib.util.find_spec("keras")
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
                from tfdist.compat import keras_mwms

                keras_mwms.apply()
            except Exception as e:  # never break the user's import; say why the fix is missing
                sys.stderr.write(f"tfdist: the Keras 3 MWMS fix was not applied: {type(e).__name__}: {e}\n")

        spec.loader.exec_module = exec_module
        return spec


def _chain_to_the_environments_own() -> None:
    mine = sys.modules.pop("sitecustomize", None)
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


if os.environ.get("TFDIST_KERAS_PATCH", "1") != "0" and "keras" not in sys.modules:
    sys.meta_path.insert(0, _AfterKeras())
_chain_to_the_environments_own()

"""Determined's worker API, implemented by tfdist (not Determined's code), so that a script written for
Determined runs unchanged under `tfdist launch`: `det.core.init()` and its contexts, `det.get_cluster_info()`,
`det.keras.DeterminedCallback`, the `determined.launch.*` launchers. On tfdist's workers this package is found
only where the real `determined` is not installed (it is last on sys.path). What tfdist cannot offer (the Trial
class APIs, calls to a Determined master) stops the script with one line saying so: docs/determined.md.
"""

from __future__ import annotations

import importlib

from determined._info import ClusterInfo, RendezvousInfo, ResourcesInfo, TrialInfo, get_cluster_info
from determined._unoffered import InvalidHP, stand_in

__version__ = "0.38.0+tfdist"
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"  # Determined's, so its scripts' logs read the same

# The Trial class APIs and their helpers: a class Determined's harness drives, which tfdist does not run.
_UNOFFERED = {
    "LegacyTrial": "Determined's Trial class API", "TrialContext": "Determined's Trial class API",
    "TrialController": "Determined's Trial class API", "ExperimentConfig": "Determined's Trial class API",
    "EnvContext": "Determined's Trial class API", "import_from_path": "Determined's Trial class API",
}
_SUBMODULES = ("core", "keras", "launch", "pytorch", "experimental", "errors", "util", "tensorboard")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"determined.{name}")
    if name in _UNOFFERED:
        return stand_in(f"determined.{name}", _UNOFFERED[name])
    raise AttributeError(f"module 'determined' has no attribute {name!r}")


__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "RendezvousInfo", "ResourcesInfo", "TrialInfo",
           "get_cluster_info"]

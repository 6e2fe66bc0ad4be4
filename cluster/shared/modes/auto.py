"""`distribution.mode: auto` (the default): which mode a job runs in, and why. Pure.

| config asks for                                         | mode    |
|---------------------------------------------------------|---------|
| a mode by name (mwms, ps, horovod, mirrored, ...)       | that one |
| optimizations.gradient_compression or auto_tune_tensor_fusion | horovod (only Horovod implements them) |
| an entrypoint naming Determined's launcher                | its mode (determined_launchers.MODES) |
| a script importing `determined`, naming no launcher      | per_node (its own launcher, as Determined runs it) |
| nothing special                                         | mwms    |

MWMS is the default because it is TensorFlow's own (no extra build), runs Keras `fit` (with tfdist's
fix) and uses one process per node on GPU nodes. The reason is stored with the job, printed by
`tfdist launch` and shown by `tfdist job`.
"""

from __future__ import annotations

import dataclasses

from cluster.shared.determined_launchers import mode_of
from cluster.shared.experiment import ExperimentConfig


@dataclasses.dataclass(frozen=True)
class ModeDecision:
    mode: str
    reason: str


def decide(config: ExperimentConfig) -> ModeDecision:
    mode = config.distribution_mode
    if mode != "auto":
        return ModeDecision(mode, f"distribution.mode is {mode}")
    if mode_of(config.launcher):
        return ModeDecision(mode_of(config.launcher), f"auto: the entrypoint names Determined's {config.launcher}")
    horovod_only = config.horovod_only_options
    if horovod_only:
        verb = "are" if len(horovod_only) > 1 else "is"
        return ModeDecision("horovod", f"auto: {', '.join(horovod_only)} {verb} only provided by Horovod")
    if config.own_launcher:
        return ModeDecision("per_node", "auto: the script imports determined and names no launcher, so it is its own "
                                        "launcher: once per node, as Determined runs it")
    return ModeDecision("mwms", "auto: MultiWorkerMirroredStrategy, TensorFlow's own collectives (no Horovod-only "
                                "option is set)")

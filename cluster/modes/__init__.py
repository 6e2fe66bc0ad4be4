"""One launch plan per distribution mode: `plan(placement, config, devices) -> JobPlan`.

A plan is the only place that decides how many processes run on each node,
their roles, each process's environment and the job's success rule. The
coordinator applies plans; it has no per-mode branches. A new mode is a new
module here, registered in PLANNERS.
"""

from __future__ import annotations

from types import ModuleType

from cluster.modes import mwms, single
from cluster.modes.base import JobPlan, NodePlacement, Placement, ProcessPlan, SuccessRule

PLANNERS: dict[str, ModuleType] = {"mwms": mwms, "mirrored": single, "central_storage": single,
                                   "one_device": single}


def planner(mode: str) -> ModuleType:
    """The module planning `mode` (config validation already refused unknown modes)."""
    try:
        return PLANNERS[mode]
    except KeyError:
        raise ValueError(f"no launch plan for distribution mode {mode!r}") from None


__all__ = ["JobPlan", "NodePlacement", "PLANNERS", "Placement", "ProcessPlan", "SuccessRule", "planner"]

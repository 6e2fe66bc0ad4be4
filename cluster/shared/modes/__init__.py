"""One launch plan per distribution mode: `plan(placement, config, devices) -> JobPlan`.

Each planner has `ports_on(nodes, config)` (ports to lease per node, before placement is final) and
`plan`. A plan is the only place that decides how many processes run on each node,
their roles, each process's environment and the job's success rule. The
coordinator applies plans; it has no per-mode branches. A new mode is a new
module here, registered in PLANNERS.
"""

from __future__ import annotations

from types import ModuleType

from cluster.shared.modes import horovod, mwms, ps, single
from cluster.shared.modes.base import JobPlan, NodePlacement, Placement, ProcessPlan, SuccessRule

# `auto` has no plan: it is decided into one of these at submit (cluster/shared/modes/auto.py).
PLANNERS: dict[str, ModuleType] = {"mwms": mwms, "ps": ps, "horovod": horovod, "mirrored": single,
                                   "central_storage": single, "one_device": single}


def planner(mode: str) -> ModuleType:
    """The module planning `mode` (config validation already refused unknown modes)."""
    try:
        return PLANNERS[mode]
    except KeyError:
        raise ValueError(f"no launch plan for distribution mode {mode!r}") from None


__all__ = ["JobPlan", "NodePlacement", "PLANNERS", "Placement", "ProcessPlan", "SuccessRule", "planner"]

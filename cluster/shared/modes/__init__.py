"""One launch plan per distribution mode: a `Planner` (cluster/shared/modes/base.py) per mode.

A planner has `ports_on(nodes, config)` (ports to lease per node, before placement is final) and
`plan(placement, config, devices) -> JobPlan`. A plan is the only place that decides how many processes
run on each node, their roles, each process's environment and the job's success rule. The coordinator
applies plans; it has no per-mode branches. A new mode is a module here with one planner, registered
in PLANNERS (one line); the annotation makes mypy check it against the protocol
(tests/unit/test_planner_protocol.py).
"""

from __future__ import annotations

from cluster.shared.modes import horovod, jax, mwms, per_node, ps, single, torch
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, PlanError, Planner, ProcessPlan,
                                       SuccessRule)
from tfdist.errors import UserError

# `auto` has no plan: it is decided into one of these at submit (cluster/shared/modes/auto.py).
PLANNERS: dict[str, Planner] = {
    "mwms": mwms.MWMS,
    "ps": ps.PS,
    "horovod": horovod.HOROVOD,
    "jax": jax.JAX,
    "torch": torch.TORCH,
    "mirrored": single.MIRRORED,
    "central_storage": single.CENTRAL_STORAGE,
    "one_device": single.ONE_DEVICE,
    "per_node": per_node.PER_NODE,
}


class UnknownModeError(UserError):
    """A distribution mode no planner is registered for (config validation refuses it first; this is
    what a caller holding an unchecked name gets)."""


def planner(mode: str) -> Planner:
    """The planner of `mode`."""
    try:
        return PLANNERS[mode]
    except KeyError:
        raise UnknownModeError(f"no launch plan for distribution mode {mode!r}; known modes: "
                               f"{', '.join(sorted(PLANNERS))}") from None


__all__ = ["JobPlan", "NodePlacement", "PLANNERS", "Placement", "PlanError", "Planner", "ProcessPlan",
           "SuccessRule", "UnknownModeError", "planner"]

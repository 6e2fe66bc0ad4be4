"""The local engine (engine.py): a job's processes on this machine, no agent."""

from __future__ import annotations

from cluster.agent.node_runs import lease_range  # the ports a local coordinator leases from: the machine's
from cluster.coordinator.engine import EngineOptions
from cluster.engines.local.engine import LocalEngine


def create(options: EngineOptions) -> LocalEngine:
    return LocalEngine(options.slots, options.gpus)


__all__ = ["LocalEngine", "create", "lease_range"]

"""The agent's entry point: what another side of the house may start in-process (`tfdist agent`, a
local launch's embedded agent, the port range its coordinator leases from). Nothing else of
`cluster.agent` is imported from outside it (tests/unit/test_layout.py checks it)."""

from __future__ import annotations

from cluster.agent.agent import Agent
from cluster.agent.ports import lease_range

__all__ = ["Agent", "lease_range"]

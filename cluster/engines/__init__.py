"""Where a job's processes run: one package per engine, each with `create(options) -> its Engine`, and one
line in ENGINES. The protocol is cluster/coordinator/engine.py; mypy holds every registered engine to it
through this annotation (tests/unit/test_engines.py). Nothing of the coordinator's job logic imports this
package: the daemon's caller (a local launch, `tfdist coordinator`) builds the engine and hands it over."""

from __future__ import annotations

from typing import Callable

from cluster.coordinator.engine import Engine, EngineOptions
from cluster.engines import agents, kubernetes, local
from tfdist.errors import UserError

ENGINES: dict[str, Callable[[EngineOptions], Engine]] = {
    "agents": agents.create,
    "kubernetes": kubernetes.create,
    "local": local.create,
}


def create_engine(name: str, options: EngineOptions) -> Engine:
    if name not in ENGINES:
        raise UserError(f"no engine named {name!r}; the engines are {', '.join(sorted(ENGINES))}")
    return ENGINES[name](options)


__all__ = ["ENGINES", "Engine", "EngineOptions", "create_engine"]

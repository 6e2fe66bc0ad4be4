"""Where a job's processes run: one package per engine under cluster/engines/, and one line each in ENGINES.

Each package declares, without importing its engine (the `tfdist` command reads them on every start):
`KIND`, an EngineKind: its name, a one-line summary, its options' type (a frozen dataclass), its `tfdist
coordinator` flags (cluster/shared/command_args.py) with the function that turns them into its options, and
`create(options)`, which imports the engine and builds it. The contract it implements is
cluster/coordinator/engine.py: mypy holds every registered engine to it (tests/unit/test_engines.py), one
contract suite runs against each (tests/integration/test_engine_contract.py), and no engine imports another
or the job side's tables (tests/unit/test_layout.py). Nothing of the coordinator's job logic imports this
package: the daemon's caller (a local launch, `tfdist coordinator`) builds the engine and hands it over."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from typing import TYPE_CHECKING, Any, Callable

from tfdist.errors import UserError

if TYPE_CHECKING:  # mypy holds each KIND's `create` to the contract; at run time nothing of it is imported here
    from cluster.coordinator.engine import Engine

ENGINES = {  # name -> the package that declares it (its KIND)
    "agents": "cluster.engines.agents",
    "kubernetes": "cluster.engines.kubernetes",
    "local": "cluster.engines.local",
}


@dataclasses.dataclass(frozen=True)
class EngineKind:
    """One registered engine. `create(options)` builds it (the engine's module is imported then);
    `options_from(args)` makes its options from `tfdist coordinator`'s parsed flags (each of `flags` is its
    own; a flag two engines share is declared alike by both)."""
    name: str
    summary: str
    options: type
    create: Callable[[Any], Engine]
    flags: tuple = ()  # cluster.shared.command_args.Arg values
    options_from: Callable[[argparse.Namespace], Any] | None = None

    def options_of(self, args: argparse.Namespace) -> Any:
        return self.options_from(args) if self.options_from is not None else self.options()


def kind(name: str) -> EngineKind:
    """The registered engine `name`; an unknown one is one line naming the engines there are."""
    if name not in ENGINES:
        raise UserError(f"no engine named {name!r}; the engines are {', '.join(sorted(ENGINES))}")
    return importlib.import_module(ENGINES[name]).KIND


def kinds() -> list[EngineKind]:
    return [kind(name) for name in sorted(ENGINES)]


def create_engine(name: str, options: Any = None) -> Engine:
    """The engine `name` built with `options` (None: its defaults)."""
    engine_kind = kind(name)
    return engine_kind.create(engine_kind.options() if options is None else options)


def engine_flags() -> tuple:
    """Every engine's `tfdist coordinator` flags, each once (the first engine that declares it, by name)."""
    seen: dict[str, Any] = {}
    for engine_kind in kinds():
        for flag in engine_kind.flags:
            seen.setdefault(flag.flags[0], flag)
    return tuple(seen.values())


__all__ = ["ENGINES", "EngineKind", "create_engine", "engine_flags", "kind", "kinds"]

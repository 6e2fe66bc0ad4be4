"""The local engine (engine.py): a job's processes on this machine, no agent. Its option: the slots (and the
GPUs behind them) of a local launch or `tfdist coordinator --engine local --slots N`."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from cluster.engines import EngineKind
from cluster.shared.command_args import arg, integer
from cluster.shared.limits import MAX_SLOTS
from tfdist.errors import UserError

if TYPE_CHECKING:
    from cluster.engines.local.engine import LocalEngine
    from cluster.shared.model import Gpu


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    slots: int = 1  # worker processes on this machine
    gpus: tuple["Gpu", ...] = ()  # the GPUs behind its slots, one each (none: CPU slots)


def create(options: LocalOptions) -> LocalEngine:
    from cluster.engines.local.engine import LocalEngine

    return LocalEngine(options.slots, options.gpus)


def _options(args: argparse.Namespace) -> LocalOptions:
    if not 1 <= args.slots <= MAX_SLOTS:
        raise UserError(f"tfdist coordinator: --slots {args.slots}: give 1 to {MAX_SLOTS} (the local engine's workers)")
    return LocalOptions(slots=args.slots)


def lease_range() -> tuple[int, int]:
    """The ports a local coordinator leases from: the machine's (the agent's executor's own rule)."""
    from cluster.agent.node_runs import lease_range as machine_range

    return machine_range()


KIND = EngineKind("local", "this machine's processes, no agent (what `tfdist launch` uses without --coordinator)",
                  LocalOptions, create,
                  flags=(arg("--slots", type=integer, metavar="N", default=1,
                             help="the local engine's worker slots (default 1)"),),
                  options_from=_options)

__all__ = ["KIND", "LocalOptions", "create", "lease_range"]

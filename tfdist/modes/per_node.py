"""`per_node`: one process per node that starts its own workers (the script is its own launcher, as Determined
runs an entrypoint without one). Every node's process runs the script; the chief alone writes tfdist's
checkpoints. tfdist.init() in it drives the node's slots when the job has one node (a mirrored strategy); across
nodes the workers it starts hold the strategy, so init() says which mode to use instead.
"""

from __future__ import annotations

from typing import Any, Callable

from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError
from tfdist.modes.base import Process


class PerNode:
    name = "per_node"
    every_rank_runs_script = True
    every_rank_saves = False
    batch_callbacks = True
    starts_own_workers = True
    no_communication_cut = "the workers are started by the script's own launcher: tfdist cannot change their optimizer"

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        return Collectives(store, rank, size, self.name)

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        return self.make_strategy(ctx)

    def make_strategy(self, ctx: Process) -> object:
        if ctx.size > 1:
            raise LaunchEnvironmentError(
                "tfdist.init() in distribution mode per_node: each node's process starts its own workers, so no "
                "strategy spans the nodes; set distribution.mode: mwms (or name determined.launch.tensorflow in the "
                "entrypoint) for TensorFlow across nodes")
        from tfdist import strategy as tf_parts  # imports TensorFlow

        return tf_parts.check_replicas(ctx, tf_parts.one_process_strategy(ctx))

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        raise LaunchEnvironmentError("optimizations.aggregation_frequency is not implemented in mode per_node")


PER_NODE = PerNode()

"""The `WorkerMode` protocol every distribution mode implements on the worker side, and `Process`, the part of
a context a mode reads.

Why a protocol: the rest of tfdist asks the job's mode (`tfdist.modes.worker_mode(ctx.distribution)`) instead
of comparing its name, so what a mode means (its collectives, what joining the job does, its strategy, who
writes checkpoints, whether every rank runs the script, how gradients aggregate) lives in its own module,
and a mode that is not TensorFlow is a new module that touches no other. A mode's strategy is opaque to
tfdist: a `tf.distribute.Strategy` in TensorFlow's modes, whatever the mode's framework uses in another.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from tfdist.collectives import Collectives


class Process(Protocol):
    """This process's place in its job, as a mode reads it (tfdist.DistributedContext has all of it). A
    protocol, not the context class, because the context is built by asking the mode (its collectives)."""

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def local_slots(self) -> int: ...

    @property
    def num_slots(self) -> int: ...

    @property
    def role(self) -> str: ...

    @property
    def is_chief(self) -> bool: ...


class WorkerMode(Protocol):
    """One distribution mode's worker side; the registry (tfdist/modes/__init__.py) holds one per name."""

    name: str  # TFDIST_DISTRIBUTION's value, as the control plane's planner of the mode sets it
    # Every rank runs the user's script past tfdist.init(). False: the chief alone does (ps: the other tasks
    # serve it inside init()), so ranks cannot meet in collectives, metrics are not averaged over them, and a
    # preemption stops the chief without waiting for peers.
    every_rank_runs_script: bool
    # Every rank takes part in writing a checkpoint and only the chief's copy is kept (MWMS: a save is a
    # collective). False: the chief alone writes, the others return at once.
    every_rank_saves: bool
    batch_callbacks: bool  # Keras runs batch-level callbacks (tf_keras under ParameterServerStrategy does not)
    # The process is its own launcher: it starts the workers of its node's slots itself (per_node), so tfdist's ranks
    # do not tell those workers apart.
    starts_own_workers: bool
    # "" where `aggregate_gradients` takes the all-reduce out of the steps between updates (tfdist diagnose's
    # no_communication variant); else why it cannot, said in the diagnosis.
    no_communication_cut: str

    def collectives(self, store: str | None, rank: int, size: int) -> Collectives:
        """The backend of ctx.allgather/gather/broadcast/barrier, built with the context (no side effects)."""

    def join(self, ctx: Process, signal_ready: Callable[[], None]) -> object:
        """What tfdist.init() does in this mode: returns the strategy and sets up what lasts as long as the
        process. A task that only serves calls `signal_ready` and never returns."""

    def make_strategy(self, ctx: Process) -> object:
        """The mode's strategy for this process, checked against the slots it was launched with. Imports the
        mode's framework: only tfdist.init() may call it."""

    def aggregate_gradients(self, optimizer: Any, steps: int) -> None:
        """Makes a Keras 3 optimizer all-reduce and apply gradients once every `steps` (> 1) steps."""


def accumulate_in_optimizer(optimizer: Any, steps: int) -> None:
    """Keras 3's own gradient accumulation: the update, and so an all-reduce placed in it (tfdist.horovod's),
    runs every `steps`-th step."""
    optimizer.gradient_accumulation_steps = steps

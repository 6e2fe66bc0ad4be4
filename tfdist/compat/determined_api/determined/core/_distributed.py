"""`det.core.DistributedContext`: a set of cooperating processes and their collectives of small values.

Determined's chief serves ZMQ sockets at `chief_ip`; tfdist's workers already share the job's key-value store
(tfdist/collectives.py: JSON or bytes, bounded waits that name the ranks that did not arrive), so the contexts
here meet there, in a group named by their size (and node, for the local collectives) so that they never meet
tfdist's own collectives. Values are JSON-serialisable, as tfdist's are: a pickled object is refused (tfdist
unpickles nothing from the network), with one line saying so."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from determined import _tfdist
from tfdist import envvars
from tfdist.collectives import CollectiveError, Collectives
from tfdist.modes import worker_mode

# Determined's collectives wait as long as it takes; tfdist's are bounded: long enough for a chief that validates or
# saves alone, and then one line naming the ranks that did not come (TFDIST_DETERMINED_TIMEOUT seconds sets it).
TIMEOUT_VARIABLE = "TFDIST_DETERMINED_TIMEOUT"
DEFAULT_TIMEOUT = 3600.0
_made = 0  # the contexts this process made: each rank makes them in the same order, so the n-th ones meet


class DistributedContext:
    def __init__(self, *, rank: int, size: int, local_rank: int, local_size: int, cross_rank: int, cross_size: int,
                 chief_ip: Optional[str] = None, pub_port: int = 0, pull_port: int = 0, port_offset: int = 0,
                 force_tcp: bool = False) -> None:
        for name, value, bound in (("rank", rank, size), ("local_rank", local_rank, local_size),
                                   ("cross_rank", cross_rank, cross_size)):
            if not 0 <= value < bound:
                raise ValueError(f"DistributedContext: {name}={value} is outside 0..{bound - 1}")
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        self.chief_ip = chief_ip
        store = os.environ.get(envvars.STORE)
        if size > 1 and not store:
            raise CollectiveError("det.core.DistributedContext: this process has no job store (TFDIST_STORE), so "
                                  "its ranks cannot meet; run the script with `tfdist launch`")
        global _made
        _made += 1
        timeout = _timeout()
        group = f"det{_made}.{size}"
        self._all = Collectives(store, rank, size, "determined", timeout=timeout, group=group,
                                caller="core_context.distributed")
        self._local = Collectives(store, local_rank, local_size, "determined", timeout=timeout,
                                  group=f"{group}.node{cross_rank}", caller="core_context.distributed")
        self._closed = False

    # ------------------------------------------------------------ Determined's constructors
    @classmethod
    def from_tf_config(cls):
        """(context, strategy) from TF_CONFIG, as Determined's: MultiWorkerMirroredStrategy across several
        workers, else MirroredStrategy over several GPUs, else the default strategy. Under tfdist's mwms
        mode (what `determined.launch.tensorflow` runs as) TF_CONFIG is tfdist's, and tfdist's Keras fix for
        MWMS is applied by its worker start-up."""
        import tensorflow as tf

        raw = os.environ.get("TF_CONFIG")
        if raw:
            tf_config = json.loads(raw)
            task = tf_config.get("task", {})
            if task.get("type") != "worker":
                raise RuntimeError(f"DistributedContext.from_tf_config() runs TF_CONFIG's workers only, got task "
                                   f"type {task.get('type')!r}; run tfdist's ps mode with tfdist.init() instead")
            workers = tf_config.get("cluster", {}).get("worker", [])
            if len(workers) > 1:
                index = int(task.get("index", 0))
                dist = cls(rank=index, size=len(workers), local_rank=0, local_size=1, cross_rank=index,
                           cross_size=len(workers), chief_ip=workers[0].rsplit(":", 1)[0])
                return dist, tf.distribute.MultiWorkerMirroredStrategy()
        dist = cls(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
        gpus = tf.config.list_physical_devices("GPU")
        return dist, (tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy())

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: Optional[str] = None) -> "DistributedContext":
        return cls(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
                   cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(), chief_ip=chief_ip)

    @classmethod
    def from_torch_distributed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From torchrun's variables (tfdist's torch mode sets them as torchrun does)."""
        env = os.environ
        try:
            size, local_size = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"])
            rank, local_rank = int(env["RANK"]), int(env["LOCAL_RANK"])
        except (KeyError, ValueError) as e:
            raise RuntimeError(f"DistributedContext.from_torch_distributed(): {e} is not set as torchrun sets it; "
                               "run the script in tfdist's torch mode (determined.launch.torch_distributed)") from None
        cross_rank = int(env.get("GROUP_RANK", rank // max(local_size, 1)))
        return cls(rank=rank, size=size, local_rank=local_rank, local_size=local_size, cross_rank=cross_rank,
                   cross_size=max(size // max(local_size, 1), 1), chief_ip=chief_ip or env.get("MASTER_ADDR"))

    @classmethod
    def from_deepspeed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        return cls.from_torch_distributed(chief_ip)

    # ------------------------------------------------------------ Determined's accessors
    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_size(self) -> int:
        return self.size

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        return self.cross_size

    def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------ collectives (JSON values; every rank calls)
    def gather(self, stuff: Any) -> Optional[list]:
        return self._all.gather(stuff)

    def allgather(self, stuff: Any) -> list:
        return self._all.allgather(stuff)

    def broadcast(self, stuff: Any = None) -> Any:
        return self._all.broadcast(stuff)

    def gather_local(self, stuff: Any) -> Optional[list]:
        return self._local.gather(stuff)

    def allgather_local(self, stuff: Any) -> list:
        return self._local.allgather(stuff)

    def broadcast_local(self, stuff: Any = None) -> Any:
        return self._local.broadcast(stuff)


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_VARIABLE, "")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        raise ValueError(f"{TIMEOUT_VARIABLE}={raw!r} is not a number of seconds") from None


class DummyDistributedContext(DistributedContext):
    """One process alone (Determined's name for it)."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)


def of_job() -> DistributedContext:
    """The job's own processes (what `det.core.init()` uses when the script passes no context): tfdist's ranks,
    their nodes as Determined's "agents"."""
    ctx = _tfdist.context()
    if worker_mode(ctx.distribution).starts_own_workers and ctx.local_slots > 1:
        raise ValueError("you must provide a valid DistributedContext for a multi-slot task: this script is its own "
                         "launcher (mode per_node), so tfdist cannot tell its workers apart; pass "
                         "det.core.init(distributed=det.core.DistributedContext(rank=..., ...))")
    info = ctx.cluster_info
    node = info.node_of(ctx.rank) if info else None
    local = sorted(node.ranks) if node else [ctx.rank]
    return DistributedContext(rank=ctx.rank, size=ctx.size, local_rank=local.index(ctx.rank), local_size=len(local),
                              cross_rank=node.node_rank if node else 0, cross_size=len(info.nodes) if info else 1,
                              chief_ip=info.node_of(0).address if info else None)

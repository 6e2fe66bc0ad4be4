"""The worker's view of its job, as values: rank, size, batch sizes, hyperparameters, cluster layout.

`context_from_env` builds one from the environment the launcher set, with no side effects (nothing
is created, logged or written); with no such environment it is the single-process context (rank 0 of
size 1, `single_process()`), so scripts run unchanged under plain `python train.py`. Every mode reads the
same environment; what differs by mode (here, its collectives) is asked of the mode (tfdist/modes/). The
process-wide part (`tfdist.init()`, the strategy, `tfdist.current()`) is tfdist/runtime.py.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from tfdist import batching, envvars, modes, preemption
from tfdist.collectives import Collectives
from tfdist.errors import LaunchEnvironmentError


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    path: str  # the prefix tf.train.Checkpoint.read() takes
    step: int


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    node_rank: int
    agent: str
    address: str  # where the job's other nodes reach it
    gpus: tuple[int, ...]  # the job's GPUs there (nvidia-smi's numbering)
    ranks: tuple[int, ...]  # the processes it runs


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """The whole job as placed: every node, its address, GPUs and ranks."""

    job_id: str
    nodes: tuple[NodeInfo, ...]
    latest_checkpoint: CheckpointInfo | None = None  # what this run resumes from (path, step); None: a fresh start
    attempt: int = 0  # the job's run: 0 first, +1 per restart (max_restarts) or resume after a preemption
    checkpoint_dir: str = ""  # <checkpoint_storage>/<job id>; "" when none is configured

    def node_of(self, rank: int) -> NodeInfo:
        return next(n for n in self.nodes if rank in n.ranks)


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    """Where this process stands in its job. Rank means process rank; node_rank is separate."""

    job_id: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    node_rank: int
    num_nodes: int
    num_slots: int  # replicas in the whole job
    local_slots: int  # replicas this process drives
    distribution: str
    hparams: Mapping[str, Any]
    global_batch_size: int | None
    per_replica_batch_size: int | None
    per_worker_batch_size: int | None
    gpus: tuple[int, ...] = ()  # GPU indices this process holds (nvidia-smi's numbering); () on CPU slots
    role: str = "worker"  # TF task type: worker; in ps mode chief, worker, ps or evaluator
    # A trial of an experiment: its searcher's name, metric, smaller_is_better and max_length ({"epochs": 8});
    # {} for a job of its own. Train for max_length and report `metric` (MetricsReporter, tfdist.report_metrics).
    searcher: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cluster_info: ClusterInfo | None = dataclasses.field(default=None, compare=False, repr=False)
    strategy: Any = dataclasses.field(default=None, compare=False, repr=False)
    collectives: Collectives | None = dataclasses.field(default=None, compare=False, repr=False)

    # Collectives of small JSON values or bytes (tfdist/collectives.py); at size 1 they return at once.
    def allgather(self, value: Any) -> list:
        """Every rank's `value`, in rank order, on every rank."""
        return self.collectives.allgather(value)

    def gather(self, value: Any) -> list | None:
        """Every rank's `value`, in rank order, on the chief; None on the others."""
        return self.collectives.gather(value)

    def broadcast(self, value: Any = None) -> Any:
        """The chief's `value` on every rank."""
        return self.collectives.broadcast(value)

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        self.collectives.barrier()

    @property
    def attempt(self) -> int:
        """The job's run this process belongs to: 0 first, +1 per restart or resume."""
        return self.cluster_info.attempt if self.cluster_info else 0

    @property
    def resume_step(self) -> int:
        """The step this run resumes at (the latest checkpoint's), 0 on a fresh start. Skip that many
        global batches of a repeated dataset so that no batch is trained twice or skipped."""
        latest = self.cluster_info.latest_checkpoint if self.cluster_info else None
        return latest.step if latest else 0

    def should_preempt(self, step: int) -> bool:
        """For custom training loops, at every step boundary on every rank: True at the step every rank
        stops at after a preemption request (`tfdist preempt`, SIGTERM). Then save (tfdist.save_checkpoint)
        and exit 0; `tfdist resume` continues from there."""
        return preemption.stop_here(step)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_evaluator(self) -> bool:
        """ps mode's side-car evaluator: it reads checkpoints, it does not train."""
        return self.role == "evaluator"

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    @property
    def effective_global_batch_size(self) -> int | None:
        """per_replica_batch_size * num_slots: batch a `model.fit` dataset by this
        (the global batch size less the dropped remainder)."""
        if self.per_replica_batch_size is None:
            return None
        return self.per_replica_batch_size * self.num_slots

    @property
    def is_distributed(self) -> bool:
        return self.size > 1

    @property
    def batch_remainder_warning(self) -> str | None:
        """What the chief logs when the global batch does not split evenly over the slots (None when it does)."""
        if self.global_batch_size is None:
            return None
        return batching.split_batch(self.global_batch_size, self.num_slots, self.local_slots).remainder_warning()


def single_process(default_hparams: Mapping[str, Any] | None = None) -> DistributedContext:
    """The null context: rank 0 of 1 on this machine alone, as under plain `python train.py` (its
    collectives return at once)."""
    return context_from_env({}, default_hparams)


def _env_int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise LaunchEnvironmentError(f"{name} is not set; start the script with `tfdist launch`")
        return default
    try:
        return int(raw)
    except ValueError:
        raise LaunchEnvironmentError(f"{name}={raw!r} is not an integer") from None


def context_from_env(env: Mapping[str, str], default_hparams: Mapping[str, Any] | None = None) -> DistributedContext:
    """Pure: builds the context (without a strategy) from an environment mapping; `{}` gives the
    single-process context. The remainder warning is the caller's to log (`batch_remainder_warning`)."""
    launched = envvars.RANK in env
    hparams: dict[str, Any] = dict(default_hparams or {})
    if launched:
        try:
            hparams.update(json.loads(env.get(envvars.HPARAMS, "{}")))
        except json.JSONDecodeError as e:
            raise LaunchEnvironmentError(f"{envvars.HPARAMS} is not valid JSON: {e}") from None
    rank = _env_int(env, envvars.RANK, 0)
    size = _env_int(env, envvars.SIZE, 1)
    local_slots = _env_int(env, envvars.LOCAL_SLOTS, 1)
    num_slots = _env_int(env, envvars.SLOTS, size * local_slots)
    if not 0 <= rank < size:
        raise LaunchEnvironmentError(f"{envvars.RANK}={rank} is outside 0..{size - 1}")

    gbs = hparams.get("global_batch_size")
    per_replica = per_worker = None
    if gbs is not None:
        if isinstance(gbs, bool) or not isinstance(gbs, int):
            raise LaunchEnvironmentError(f"global_batch_size must be an integer, got {gbs!r}")
        sizes = batching.split_batch(gbs, num_slots, local_slots)
        per_replica, per_worker = sizes.per_replica, sizes.per_worker

    job_id = env.get(envvars.JOB_ID, "local")
    distribution = env.get(envvars.DISTRIBUTION, modes.DEFAULT)
    return DistributedContext(
        job_id=job_id,
        rank=rank,
        size=size,
        local_rank=_env_int(env, envvars.LOCAL_RANK, 0),
        local_size=_env_int(env, envvars.LOCAL_SIZE, 1),
        node_rank=_env_int(env, envvars.NODE_RANK, 0),
        num_nodes=_env_int(env, envvars.NUM_NODES, 1),
        num_slots=num_slots,
        local_slots=local_slots,
        distribution=distribution,
        hparams=hparams,
        global_batch_size=gbs,
        per_replica_batch_size=per_replica,
        per_worker_batch_size=per_worker,
        gpus=_env_gpus(env),
        role=env.get(envvars.ROLE, "worker"),
        searcher=_env_json(env, envvars.SEARCHER),
        cluster_info=_env_cluster(env, job_id, size),
        collectives=modes.worker_mode(distribution).collectives(env.get(envvars.STORE), rank, size),
    )


def _env_cluster(env: Mapping[str, str], job_id: str, size: int) -> ClusterInfo:
    raw = env.get(envvars.CLUSTER)
    if not raw:  # plain `python train.py`: this machine alone
        return ClusterInfo(job_id, (NodeInfo(0, "local", "127.0.0.1", _env_gpus(env), tuple(range(size))),))
    try:
        data = json.loads(raw)
        nodes = tuple(NodeInfo(int(n["node_rank"]), str(n["agent"]), str(n["address"]),
                               tuple(int(g) for g in n["gpus"]), tuple(int(r) for r in n["ranks"]))
                      for n in data["nodes"])
    except (ValueError, KeyError, TypeError) as e:
        raise LaunchEnvironmentError(f"{envvars.CLUSTER} is not the cluster layout tfdist writes: {e}") from None
    latest = data.get("latest_checkpoint")
    try:
        checkpoint = CheckpointInfo(str(latest["path"]), int(latest["step"])) if latest else None
    except (KeyError, TypeError, ValueError) as e:
        raise LaunchEnvironmentError(f"{envvars.CLUSTER}: latest_checkpoint is not what tfdist writes: {e}") from None
    return ClusterInfo(data.get("job_id", job_id), nodes, checkpoint, int(data.get("attempt", 0)),
                       str(data.get("checkpoint_dir", "")))


def _env_json(env: Mapping[str, str], name: str) -> dict[str, Any]:
    try:
        value = json.loads(env.get(name) or "{}")
    except json.JSONDecodeError as e:
        raise LaunchEnvironmentError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise LaunchEnvironmentError(f"{name} is not a JSON object")
    return value


def _env_gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    raw = env.get(envvars.GPUS, "")
    try:
        return tuple(int(g) for g in raw.split(",") if g.strip())
    except ValueError:
        raise LaunchEnvironmentError(f"{envvars.GPUS}={raw!r} is not a comma-separated list of GPU indices") from None

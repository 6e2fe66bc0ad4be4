"""`det.get_cluster_info()`: the running trial as Determined describes it, from what tfdist's launcher put in
the worker's environment. A Determined "container" is a tfdist node: its address, its rank among the job's
nodes, its slots (GPU indices on GPU nodes, else 0..n-1)."""

from __future__ import annotations

import os
from typing import Any, Optional

from determined import _tfdist
from tfdist import envvars
from tfdist.compat import rendezvous



class RendezvousInfo:
    def __init__(self, container_addrs: list[str], container_rank: int, container_slot_counts: list[int]):
        self.container_addrs = container_addrs
        self.container_rank = container_rank
        self.container_slot_counts = container_slot_counts


class ResourcesInfo:
    def __init__(self, gpu_uuids: list[str]):
        self.gpu_uuids = gpu_uuids


class TrialInfo:
    def __init__(self, trial_id: int, experiment_id: int, trial_seed: int, hparams: dict[str, Any],
                 config: dict[str, Any], steps_completed: int, trial_run_id: int, debug: bool = False):
        self.trial_id, self.experiment_id, self.trial_seed = trial_id, experiment_id, trial_seed
        self.hparams = hparams
        self._config = config
        self._steps_completed = steps_completed
        self._trial_run_id = trial_run_id
        self._debug = debug


class ClusterInfo:
    """What Determined's ClusterInfo holds, in tfdist's terms (the job is the trial, its run the allocation)."""

    def __init__(self) -> None:
        ctx = _tfdist.context()
        info = ctx.cluster_info
        nodes = sorted(info.nodes, key=lambda n: n.node_rank) if info else []
        me = info.node_of(ctx.rank) if info else None
        self._tfdist = ctx
        self.master_url = ""  # no Determined master: the coordinator is tfdist's
        self.cluster_id = "tfdist"
        self.agent_id = me.agent if me else "local"
        self.task_id = ctx.job_id
        self.allocation_id = f"{ctx.job_id}.{ctx.attempt}"
        self.session_token = ""
        self.task_type = "TRIAL"
        self.master_cert_name: Optional[str] = None
        self.master_cert_file: Optional[str] = None
        self.slot_ids = _slots_of(me, ctx.local_slots)
        self._rendezvous = RendezvousInfo([n.address for n in nodes], me.node_rank if me else 0,
                                          [len(_slots_of(n, ctx.local_slots)) for n in nodes])
        latest = info.latest_checkpoint if info else None
        config = _tfdist.env_json(envvars.EXPERIMENT_CONFIG, {}) or {"hyperparameters": dict(ctx.hparams)}
        trial_id = _tfdist.trial_number(ctx.job_id)
        seed = (config.get("reproducibility") or {}).get("experiment_seed", 0) if isinstance(config, dict) else 0
        # experiment_id: the trial's own number (tfdist's trials are jobs; `tfdist experiment` shows their experiment)
        self._trial = TrialInfo(trial_id, trial_id,
                                (int(seed) + trial_id) % 2**31, dict(ctx.hparams), config,
                                latest.step if latest else 0, ctx.attempt + 1)
        self._latest_checkpoint = os.path.basename(latest.path.rstrip("/")) if latest else None
        self._user_data = _tfdist.env_json(envvars.USER_DATA, {})

    @property
    def latest_checkpoint(self) -> Optional[str]:
        """The storage id of the checkpoint this run continues from (None: a fresh start)."""
        return self._latest_checkpoint

    @property
    def user_data(self) -> dict[str, Any]:
        """The config's `data` section."""
        return self._user_data

    @property
    def trial(self) -> TrialInfo:
        return self._trial

    @property
    def container_addrs(self) -> list[str]:
        return self._rendezvous.container_addrs

    @property
    def container_rank(self) -> int:
        return self._rendezvous.container_rank

    @property
    def container_slot_counts(self) -> list[int]:
        return self._rendezvous.container_slot_counts

    @property
    def gpu_uuids(self) -> list[str]:
        """The node's GPUs of this job, by index (tfdist pins them by nvidia-smi's numbering)."""
        return [str(g) for g in self.slot_ids] if self._tfdist.gpus else []


def _slots_of(node, local_slots: int) -> list[int]:
    if node is None:
        return list(range(local_slots))
    if node.gpus:
        return list(node.gpus)
    return list(range(len(node.ranks) * max(1, local_slots)))


_cached: Optional[ClusterInfo] = None


def get_cluster_info() -> Optional[ClusterInfo]:
    """The running trial's info, or None off-cluster (a script run without `tfdist launch`)."""
    global _cached
    if not _tfdist.launched():
        return None
    if _cached is None:
        _cached = ClusterInfo()
        rendezvous.signal_ready()  # the script runs (its own launcher may start workers that never init())
    return _cached

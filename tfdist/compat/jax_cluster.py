"""tfdist's job as one of JAX's cluster environments, so that `jax.distributed.initialize()` with no
arguments joins it (coordinator, process count and id from what the jax mode's plan set, the
TFDIST_* ranks). JAX finds its environments by subclasses of its `ClusterEnv` (jax/_src/clusters, not a
public module: the import is checked and a JAX without it says so once) and takes the first present one:
tfdist's goes first, ahead of JAX's Slurm and Kubernetes detection, which would read an allocation's or a
pod's variables and pick a coordinator tfdist never leased."""

from __future__ import annotations

import os

from tfdist import envvars

COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"  # cluster/shared/modes/jax.py sets it


def present(env=os.environ) -> bool:
    return env.get(envvars.DISTRIBUTION) == "jax" and envvars.RANK in env and COORDINATOR_ADDRESS in env


def register() -> bool:
    """Puts tfdist's cluster first among JAX's; False where this JAX has no such registry."""
    try:
        from jax._src.clusters import ClusterEnv
    except ImportError:
        return False
    known = ClusterEnv._cluster_types
    if any(getattr(kind, "name", "") == "tfdist" for kind in known):
        return True

    class TfdistCluster(ClusterEnv):
        name = "tfdist"
        opt_in_only_method = False

        @classmethod
        def is_env_present(cls) -> bool:
            return present()

        @classmethod
        def get_coordinator_address(cls, timeout_secs=None, override_coordinator_port=None) -> str:
            return os.environ[COORDINATOR_ADDRESS]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ[envvars.SIZE])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ[envvars.RANK])

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return None  # a process sees the devices its agent gave it (CUDA_VISIBLE_DEVICES): all of them

    known.remove(TfdistCluster)  # __init_subclass__ appended it last
    known.insert(0, TfdistCluster)
    return True

"""tfdist's job for JAX: one of JAX's cluster environments, so that `jax.distributed.initialize()` with no
arguments joins it (coordinator, process count and id from what the jax mode's plan set, the
TFDIST_* ranks). JAX finds its environments by subclasses of its `ClusterEnv` (jax/_src/clusters, not a
public module: the import is checked and a JAX without it says so once) and takes the first present one:
tfdist's goes first, ahead of JAX's Slurm and Kubernetes detection, which would read an allocation's or a
pod's variables and pick a coordinator tfdist never leased. And CPU collectives on the job's address: JAX
makes its Gloo transport with no hostname, so Gloo takes the address the machine's hostname resolves to
(often loopback: across hosts every peer then waits on a connection that never comes, "Gloo context
initialization failed: Connect timeout"); tfdist passes the node's address for the job."""

from __future__ import annotations

import os

from tfdist import envvars

COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"  # cluster/shared/modes/jax.py sets it


def present(env=os.environ) -> bool:
    """A process of a tfdist job told where JAX's coordinator is (only the jax mode registers this cluster)."""
    return envvars.RANK in env and envvars.SIZE in env and COORDINATOR_ADDRESS in env


def register() -> bool:
    """Puts tfdist's cluster first among JAX's and Gloo on the job's address; False where this JAX has no
    such registry."""
    _gloo_on_the_job_address()
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


def _gloo_on_the_job_address() -> None:
    address = os.environ.get(envvars.NODE_ADDRESS)
    try:
        from jax._src import xla_bridge
    except ImportError:
        return
    native = getattr(xla_bridge, "_jax", None)  # JAX's extension module (older JAX: another name: left alone)
    make = getattr(native, "make_gloo_tcp_collectives", None)
    if not address or make is None or getattr(make, "_tfdist_address", None):
        return

    def on_the_job_address(distributed_client, hostname=None, interface=None):
        return make(distributed_client=distributed_client, hostname=hostname or address, interface=interface)

    on_the_job_address._tfdist_address = address  # type: ignore[attr-defined]
    native.make_gloo_tcp_collectives = on_the_job_address

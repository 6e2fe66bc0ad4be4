"""The Kubernetes engine (engine.py): one pod per whole node of a gang, pinned so that the scheduler and
kubelets still account for its GPUs, each pod its node's agent for the run; a headless Service per run;
nodes and pods listed once and then watched. Importing this package imports no Kubernetes client (engine.create does).

    engine.py      the engine: offered nodes, a run's objects created together, pods watched, re-adoption
    options.py     its options and `tfdist coordinator` flags
    offers.py      what the cluster offers: each node's slots (free allocatable GPUs, or CPUs), or why not
    manifests.py   a run's objects: pods pinned by node affinity, the headless Service, the owning Secret
    gangs.py       what a run's pods say: starting, running, not started in time, broken, lost
    rbac.py        the coordinator's least rights: its namespace's job objects, reading nodes and pods
    deploy.py      the coordinator's own objects (`tfdist kubernetes manifests`): RBAC, Deployment, PVC, Service
    api.py         the thin edge to the API server (lightkube): calls, lists and watches, counted
    watched.py     one kind of object as last seen: listed once, then watched; woken only by what it keeps
    pod_events.py  Kubernetes Events on a run's pods: placed, torn down, preempting, failed
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.engines import EngineKind
from cluster.engines.kubernetes.options import FLAGS, KubernetesOptions, options_from

if TYPE_CHECKING:
    from cluster.engines.kubernetes.engine import KubernetesEngine


def create(options: KubernetesOptions) -> KubernetesEngine:
    from cluster.engines.kubernetes.engine import KubernetesEngine

    return KubernetesEngine(options)


KIND = EngineKind("kubernetes", "a pod per whole node of a Kubernetes cluster (docs/kubernetes.md)", KubernetesOptions,
                  create, FLAGS, options_from)

"""The Kubernetes engine's options and its `tfdist coordinator` flags: where its jobs' pods go, how they reach
the coordinator, which nodes it offers. Light: the `tfdist` command reads the flags on every start."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex

from cluster.shared.command_args import arg, bounded, positive_float
from tfdist.errors import UserError

POD_AGENT_COMMAND_ENV = "TFDIST_POD_AGENT_COMMAND"  # how its pods run tfdist, where the image's entry is not `tfdist`


@dataclasses.dataclass(frozen=True)
class KubernetesOptions:
    namespace: str = "tfdist"
    kubeconfig: str = ""  # "": the pod's ServiceAccount (in-cluster)
    advertise: str = ""  # HOST:PORT the pods reach the coordinator at ("": its --listen address)
    image: str = ""  # the pods' image where a job's config names none (`kubernetes.image`)
    agent_command: tuple[str, ...] = ("tfdist",)  # how a pod runs tfdist (its image's entry)
    start_timeout: float = 120.0  # seconds a gang's pods have to be bound to their nodes
    pull_timeout: float = 600.0  # seconds a bound pod may take to get its image (pulls are tried again meanwhile)
    node_selector: str = ""  # "k=v,...": only the nodes with these labels are offered ("": every node)
    tolerate: tuple[str, ...] = ("nvidia.com/gpu",)  # taint keys tolerated, in offers and pods alike
    node_kind: str = "auto"  # gpu, cpu, or auto: GPU nodes where any is offered (never both in one gang)
    system_nodes: bool = False  # offer control-plane nodes too
    job_service_account: str = "tfdist-job"  # the jobs' pods' ServiceAccount (no rights, no token)
    guaranteed: bool = False  # the jobs' pods' CPU and memory limits equal their requests (QoS Guaranteed)
    allow_secrets: tuple[str, ...] = ()  # the Secrets a job's pod_spec may give its pods
    # An autoscaled pool (the --node-selector's nodes): it may grow to pool_max_nodes nodes of pool_node_slots
    # slots each (GPUs; CPUs with node_kind cpu). 0: the pool is what is there.
    pool_max_nodes: int = 0
    pool_node_slots: int = 0
    kueue_queue: str = ""  # a Kueue LocalQueue of the namespace: each run's pods are one pod group it admits

    @property
    def autoscaled(self) -> bool:
        return self.pool_max_nodes > 0


def _seconds(flag: str, default: float, help: str) -> object:
    return arg(flag, type=positive_float, default=default, metavar="SECONDS", help=help)


FLAGS = (
    arg("--namespace", default="tfdist", metavar="NS", help="kubernetes: its jobs' pods' namespace (default tfdist)"),
    arg("--kubeconfig", metavar="FILE", help="kubernetes: reach the cluster so (default: in-cluster ServiceAccount)"),
    arg("--advertise", metavar="HOST:PORT", help="kubernetes: where its pods reach this coordinator (default --listen)"),
    arg("--image", metavar="IMAGE", help="kubernetes: the pods' image where a job names none (tfdist installed)"),
    arg("--node-selector", metavar="LABEL=VALUE[,...]", help="kubernetes: offer only the nodes with these labels"),
    _seconds("--pod-start-timeout", 120.0, "kubernetes: a gang's pods must all be bound to their nodes within this, "
                                           "else the job is placed again (default 120)"),
    _seconds("--image-pull-timeout", 600.0, "kubernetes: a bound pod may take this long to get its image (failed "
                                            "pulls are tried again meanwhile), else the job fails (default 600)"),
    arg("--tolerate", action="append", metavar="TAINT_KEY",
        help="kubernetes: offer nodes with taints of this key and tolerate them in the pods (repeatable; default "
             "nvidia.com/gpu, as GKE taints GPU pools; none: no taint)"),
    arg("--node-kind", default="auto", choices=["auto", "gpu", "cpu"],
        help="kubernetes: offer GPU nodes or CPU nodes, never both in one gang (default auto: GPU nodes if any)"),
    arg("--offer-system-nodes", action="store_true", help="kubernetes: offer control-plane nodes to jobs too"),
    arg("--job-service-account", default="tfdist-job", metavar="NAME",
        help="kubernetes: the jobs' pods' ServiceAccount (default tfdist-job: no rights, no token)"),
    arg("--pod-qos", default="burstable", choices=["burstable", "guaranteed"],
        help="kubernetes: guaranteed: the jobs' pods' CPU and memory limits equal their requests"),
    arg("--allow-secret", action="append", metavar="NAME",
        help="kubernetes: a Secret a job's pod_spec may give its pods (repeatable; default: none)"),
    arg("--kueue-queue", metavar="LOCALQUEUE",
        help="kubernetes: each run's pods are one Kueue pod group of this LocalQueue (in --namespace): Kueue admits "
             "it under its ClusterQueue's quota, and the gang waits, gated, until it does"),
    arg("--pool-max-nodes", type=bounded(1, 100_000), metavar="N",
        help="kubernetes: the --node-selector pool is autoscaled and may grow to N nodes: a job that fits once "
             "it grew waits (a pending placeholder pod per missing node asks the autoscaler) instead of being "
             "refused"),
    arg("--pool-node-slots", type=bounded(1, 4096), metavar="SLOTS",
        help="kubernetes: with --pool-max-nodes, the GPUs of a node the autoscaler adds (its CPUs with "
             "--node-kind cpu)"),
)


def names(flag: str, values: list[str]) -> list[str]:
    """A repeatable flag's values, comma-separated ones split; "none" alone: none."""
    found = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if found == ["none"]:
        return []
    for name in found:
        if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_./]{0,251}[A-Za-z0-9])?", name):
            raise UserError(f"tfdist coordinator: {flag} {name!r} is not a Kubernetes name or key; e.g. "
                             f"{flag} nvidia.com/gpu")
    return found


def options_from(args: argparse.Namespace) -> KubernetesOptions:
    agent_command = tuple(shlex.split(os.environ.get(POD_AGENT_COMMAND_ENV, ""))) or ("tfdist",)
    return KubernetesOptions(
        namespace=args.namespace, kubeconfig=args.kubeconfig or "", advertise=args.advertise or "",
        image=args.image or "", agent_command=agent_command, start_timeout=args.pod_start_timeout,
        pull_timeout=args.image_pull_timeout, node_selector=args.node_selector or "",
        tolerate=tuple(names("--tolerate", args.tolerate or ["nvidia.com/gpu"])), node_kind=args.node_kind,
        system_nodes=args.offer_system_nodes, job_service_account=args.job_service_account,
        guaranteed=args.pod_qos == "guaranteed", allow_secrets=allowed_secrets(args.allow_secret or []),
        kueue_queue=kueue_queue(getattr(args, "kueue_queue", None)), **pool(args))


def kueue_queue(name: str | None) -> str:
    """--kueue-queue: a LocalQueue's name (a DNS label)."""
    if name is None:
        return ""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        raise UserError(f"tfdist coordinator: --kueue-queue {name!r} is not a LocalQueue's name (lowercase letters, "
                        "digits and '-'); e.g. --kueue-queue team-a")
    return name


def pool(args: argparse.Namespace) -> dict[str, int]:
    """--pool-max-nodes and --pool-node-slots, given together and with the pool's --node-selector."""
    most, slots = getattr(args, "pool_max_nodes", None), getattr(args, "pool_node_slots", None)
    if most is None and slots is None:
        return {}
    if most is None or slots is None:
        given, missing = ("--pool-max-nodes", "--pool-node-slots") if slots is None else \
            ("--pool-node-slots", "--pool-max-nodes")
        raise UserError(f"tfdist coordinator: {given} needs {missing} too (how many nodes the autoscaled pool may "
                        "grow to, and each one's GPUs): e.g. --pool-max-nodes 8 --pool-node-slots 8")
    if not args.node_selector:
        raise UserError("tfdist coordinator: --pool-max-nodes needs --node-selector LABEL=VALUE naming the "
                        "autoscaled pool's node labels (its placeholder pods ask the autoscaler for such nodes)")
    return {"pool_max_nodes": most, "pool_node_slots": slots}


def allowed_secrets(values: list[str]) -> tuple[str, ...]:
    """--allow-secret's names; never the coordinator's own admin credential (admin_secret.py)."""
    found = tuple(names("--allow-secret", values))
    if "tfdist-admin" in found:
        raise UserError("tfdist coordinator: --allow-secret tfdist-admin would give jobs the administrator's "
                        "credential; allow only the Secrets their pods need")
    return found

"""What the Kubernetes engine reads of the cluster, each listed once and then watched (watched.py): its
namespace's tfdist pods (its runs'), the nodes of its pool, and every namespace's pods bound to a node and not
ended (what other workloads hold of a node); only the first wakes the engine. What the cluster offers (offers.py) is read from what the watches
keep, never by listing again: when one of them changed (at most once each OFFERS_GAP) and at least each
OFFERS_EVERY (a node that held a run when last read may be free now)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from cluster.engines.kubernetes.api import KubernetesError
from cluster.engines.kubernetes.offers import NodeOffer, node_offers, slim_node, slim_pod
from cluster.engines.kubernetes.watched import Watched, by_namespace_and_name

OFFERS_GAP = 1.0  # seconds at least between two readings of what the cluster offers
OFFERS_EVERY = 5.0  # seconds at most between two readings
FIRST_LIST = 120.0  # seconds the API has to answer the first listings at start (a big cluster's pods, in pages)
WATCH_THREAD = "kubernetes-watch-"  # the watches' threads' names begin so


class ClusterView:
    def __init__(self, namespace: str, stop: threading.Event, changed: Callable[[], None]):
        self.pods = Watched(f"namespace {namespace}'s tfdist pods", stop, changed)
        # The nodes and others' pods wake nothing: with 10,000 pods they change many times a second, and the
        # engine's rounds (each second) read them when they are due (offers_due).
        self.nodes = Watched("the cluster's nodes", stop, lambda: None, slim_node)
        self.bound = Watched("every namespace's bound pods", stop, lambda: None, slim_pod, by_namespace_and_name)
        self._stop = stop
        self._read = (-1, -1)  # the versions of nodes and bound the offers were last read from
        self._next = self._due = 0.0

    def start(self, api: Any, selector: Mapping[str, str],
              start_thread: Callable[[str, Callable[[], None]], None]) -> None:
        """Starts the watches, each in a thread of its own, and waits (bounded) until each listed once."""
        self.pods.start = api.watch_pods
        self.nodes.start = lambda seen, listed, stop: api.watch_nodes(seen, listed, stop, selector)
        self.bound.start = api.watch_bound_pods
        deadline = time.monotonic() + FIRST_LIST
        for watched, name in ((self.pods, "pods"), (self.nodes, "nodes"), (self.bound, "bound-pods")):
            start_thread(f"{WATCH_THREAD}{name}", watched.run)
        for watched in (self.pods, self.nodes, self.bound):
            if not watched.listed.wait(max(0.0, deadline - time.monotonic())):
                self._stop.set()
                raise KubernetesError(f"the Kubernetes API did not list {watched.what} within {FIRST_LIST:g}s"
                                      f"{': ' + watched.error if watched.error else ''}; check --kubeconfig, the API "
                                      "server, and the coordinator's RBAC (tfdist kubernetes manifests)")

    def offers_due(self) -> bool:
        now = time.monotonic()
        return now >= self._next and ((self.nodes.version, self.bound.version) != self._read or now >= self._due)

    def read_again(self) -> None:
        """The offers are read at the next round (a node given back: its slots may have changed meanwhile)."""
        self._read, self._next = (-1, -1), 0.0

    def offers(self, **options: Any) -> list[NodeOffer]:
        """What the cluster offers now (node_offers' `options`), from what the watches keep."""
        now = time.monotonic()
        self._next, self._due = now + OFFERS_GAP, now + OFFERS_EVERY
        self._read = (self.nodes.version, self.bound.version)
        return node_offers(self.nodes.all(), self.bound.all(), **options)

    def uid_of(self, pod: str) -> str:
        """The uid of this namespace's tfdist pod `pod`, as last seen ("" if not seen)."""
        return ((self.pods.get(pod) or {}).get("metadata") or {}).get("uid", "")

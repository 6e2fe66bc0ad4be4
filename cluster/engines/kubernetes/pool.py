"""An autoscaled node pool (`--pool-max-nodes N --pool-node-slots S` with the pool's `--node-selector`): the job
side is told how many more nodes may appear (NodesExpected: N less the pool's nodes now), so a job that fits
once the pool grew waits with a reason instead of being refused; it answers with how many of them the queued
jobs lack (Engine.demand), and this keeps that many placeholder pods pending (manifests.placeholder), the
demand a cluster autoscaler (or Karpenter) sees and answers with nodes. A placeholder that is bound found its
node: it is deleted at once, and the node is offered as any other."""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, Callable, Mapping

from cluster.coordinator.engine import NodesExpected
from cluster.engines.kubernetes import manifests
from cluster.engines.kubernetes.options import KubernetesOptions
from tfdist.errors import UserError

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
IN_FLIGHT = 30.0  # seconds a placeholder just made counts as pending before the pods' watch has shown it


class AutoscaledPool:
    def __init__(self, options: KubernetesOptions, api: Callable[[], Any], policy: manifests.PodPolicy,
                 selector: Mapping[str, str]):
        self.options, self._api, self._policy, self._selector = options, api, policy, selector
        self.wanted = 0  # placeholders the queued jobs ask for (Engine.demand)
        self._made: dict[str, float] = {}  # placeholders made, not seen in the watch yet -> when (monotonic)
        self._said = ""
        self._told: tuple[NodesExpected, ...] | None = None  # what the job side was last told may be added

    def expected(self, nodes_now: int) -> tuple[NodesExpected, ...]:
        room = max(0, self.options.pool_max_nodes - nodes_now)
        why = f"the autoscaler of pool {self.options.node_selector} (--pool-max-nodes {self.options.pool_max_nodes})"
        return (NodesExpected(self.options.pool_node_slots, room, why),) if room else ()

    def tell(self, host: Any, nodes_now: int) -> None:
        """Tells the job side (EngineHost.nodes_expected) how many nodes may still be added, when it changed."""
        expected = self.expected(nodes_now)
        if expected != self._told:
            self._told = expected
            host.nodes_expected(expected, time.time())

    def demand(self, nodes: Mapping[int, int]) -> None:
        self.wanted = nodes.get(self.options.pool_node_slots, 0)

    def reconcile(self, pods: list[Json]) -> None:
        """Deletes the placeholders that found their node, and makes or deletes pending ones to match `wanted`.
        `pods`: this namespace's tfdist pods as last seen."""
        now = time.monotonic()
        mine = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(manifests.PLACEHOLDER_LABEL)
                and not p["metadata"].get("deletionTimestamp")]
        seen = {p["metadata"]["name"] for p in mine}
        self._made = {n: t for n, t in self._made.items() if n not in seen and now - t < IN_FLIGHT}
        bound = [p["metadata"]["name"] for p in mine if (p.get("spec") or {}).get("nodeName")]
        pending = sorted(p["metadata"]["name"] for p in mine if not (p.get("spec") or {}).get("nodeName"))
        try:
            if bound:
                self._api().delete("Pod", bound)
                log.info("kubernetes: placeholder pods %s found their nodes: deleted", ", ".join(bound))
            surplus = len(pending) + len(self._made) - self.wanted
            if surplus > 0 and pending:
                self._api().delete("Pod", pending[-surplus:])
            for _ in range(-surplus):
                name = f"tfdist-placeholder-{secrets.token_hex(4)}"
                self._api().create(manifests.placeholder(
                    name, self.options.namespace, image=self.options.image,
                    slots=self.options.pool_node_slots, gpus=self.options.node_kind != "cpu",
                    selector=self._selector, policy=self._policy))
                self._made[name] = now
            self._said = ""
        except UserError as e:  # the API refused (a quota): said once, tried again next round
            if str(e) != self._said:
                self._said = str(e)
                log.warning("kubernetes: the autoscaled pool's placeholder pods: %s", e)

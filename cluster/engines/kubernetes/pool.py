"""An autoscaled node pool (`--pool-max-nodes N --pool-node-slots S` with the pool's `--node-selector`): the job
side is told how many more nodes may appear (NodesExpected: N less the pool's nodes now), so a job that fits
once the pool grew waits with a reason instead of being refused; it answers with how many of them the queued
jobs lack (Engine.demand), and this keeps that many placeholder pods pending (manifests.placeholder: never on
a node the pool has), the demand a cluster autoscaler (or Karpenter) sees and answers with nodes. A
placeholder that is bound found its node: it is deleted at once, and the node is offered as any other. A
coordinator deletes the placeholders it finds as it starts (a coordinator before it left them) and as it
stops."""

from __future__ import annotations

import logging
import re
import secrets
import time
from typing import Any, Callable, Mapping

from cluster.coordinator.engine import NodesExpected
from cluster.engines.kubernetes import manifests
from cluster.engines.kubernetes.offers import ready
from cluster.engines.kubernetes.options import KubernetesOptions
from tfdist.errors import UserError

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
IN_FLIGHT = 30.0  # seconds a placeholder just made counts as pending before the pods' watch has shown it
REFUSED_PAUSE = 30.0  # seconds before placeholders are asked for again after the API refused one (a quota)


def placeholders(pods: list[Json]) -> list[Json]:
    """The placeholder pods among this namespace's tfdist pods, those not being deleted."""
    return [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(manifests.PLACEHOLDER_LABEL)
            and not p["metadata"].get("deletionTimestamp")]


class AutoscaledPool:
    def __init__(self, options: KubernetesOptions, api: Callable[[], Any], policy: manifests.PodPolicy,
                 selector: Mapping[str, str]):
        self.options, self._api, self._policy, self._selector = options, api, policy, selector
        self.wanted = 0  # placeholders the queued jobs ask for (Engine.demand)
        self._found = 0  # placeholders bound (their nodes came) since the queue's lack was last told
        self._made: dict[str, float] = {}  # placeholders made, not seen in the watch yet -> when (monotonic)
        self._said = ""
        self._paused_until = 0.0  # monotonic: the API refused a placeholder; none is made before then
        self._told: tuple[NodesExpected, ...] | None = None  # what the job side was last told may be added

    def expected(self, nodes: list[Json]) -> tuple[NodesExpected, ...]:
        """The pool's room: --pool-max-nodes less its Ready nodes (one still booting is still to come)."""
        room = max(0, self.options.pool_max_nodes - sum(map(ready, nodes)))
        why = f"the autoscaler of pool {self.options.node_selector} (--pool-max-nodes {self.options.pool_max_nodes})"
        return (NodesExpected(self.options.pool_node_slots, room, why),) if room else ()

    def tell(self, host: Any, nodes: list[Json]) -> None:
        """Tells the job side (EngineHost.nodes_expected) how many nodes may still be added, when it changed.
        `nodes`: the pool's nodes as last seen."""
        expected = self.expected(nodes)
        if expected != self._told:
            self._told = expected
            host.nodes_expected(expected, time.time())

    @staticmethod
    def clear_with(api: Any, pods: list[Json]) -> None:
        """Deletes every placeholder among `pods` (this namespace's tfdist pods)."""
        names = [p["metadata"]["name"] for p in placeholders(pods)]
        if names:
            api.delete("Pod", names)

    def clear(self, pods: list[Json]) -> None:
        """As the coordinator stops: its placeholders go (best effort: a restarted one deletes what is left)."""
        try:
            self.clear_with(self._api(), pods)
        except Exception as e:  # noqa: BLE001 - the API gone as the coordinator stops: said, not fatal
            log.warning("kubernetes: the autoscaled pool's placeholder pods not deleted: %s", e)

    def demand(self, nodes: Mapping[int, int]) -> None:
        self.wanted, self._found = nodes.get(self.options.pool_node_slots, 0), 0

    def reconcile(self, pods: list[Json], nodes: list[str]) -> None:
        """Deletes the placeholders that found their node, and makes or deletes pending ones to match what the
        queue lacks (less the nodes found since it was told). `pods`: this namespace's tfdist pods as last
        seen; `nodes`: the pool's nodes' names (a new placeholder may go to none of them)."""
        now = time.monotonic()
        if now < self._paused_until:
            return
        mine = placeholders(pods)
        seen = {p["metadata"]["name"] for p in mine}
        self._made = {n: t for n, t in self._made.items() if n not in seen and now - t < IN_FLIGHT}
        bound = [p["metadata"]["name"] for p in mine if (p.get("spec") or {}).get("nodeName")]
        pending = sorted(p["metadata"]["name"] for p in mine if not (p.get("spec") or {}).get("nodeName"))
        try:
            if bound:
                self._api().delete("Pod", bound)
                self._found += len(bound)
                log.info("kubernetes: placeholder pods %s found their nodes: deleted", ", ".join(bound))
            surplus = len(pending) + len(self._made) - max(0, self.wanted - self._found)
            if surplus > 0 and pending:
                self._api().delete("Pod", pending[-surplus:])
            for _ in range(-surplus):
                name = f"tfdist-placeholder-{secrets.token_hex(4)}"
                self._api().create(manifests.placeholder(
                    name, self.options.namespace, slots=self.options.pool_node_slots,
                    gpus=self.options.node_kind != "cpu", selector=self._selector, existing=nodes,
                    policy=self._policy))
                self._made[name] = now
            self._said = ""
        except UserError as e:  # the API refused (a quota): said once, tried again after a pause
            self._paused_until = now + REFUSED_PAUSE
            said = re.sub(r"tfdist-placeholder-[0-9a-f]+", "tfdist-placeholder-...", str(e))  # one line per kind
            if said != self._said:
                self._said = said
                log.warning("kubernetes: the autoscaled pool's placeholder pods: %s; tried again every %gs", said,
                            REFUSED_PAUSE)

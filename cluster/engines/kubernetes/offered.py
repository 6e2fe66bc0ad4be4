"""The offered nodes the Kubernetes engine answers for while no pod of a run is their agent: registered with
the job side as nodes of the node protocol (EngineHost.register_node), reported on in-process, and
withdrawn (lost, saying why) when the cluster no longer offers them; a cordoned node (a drain) stays known with
all of its slots held, so no job is placed there and one that needs it waits. A node whose pod is a run's agent
is `handed` to that run; the engine gives it back once that pod is gone."""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from cluster.coordinator.engine import EngineHost
from cluster.engines.kubernetes.offers import NodeOffer
from cluster.shared.model import AgentRecord, Gpu
from cluster.shared.work import AgentReport

log = logging.getLogger("tfdist.kubernetes")


class OfferedNodes:
    def __init__(self, host: Callable[[], EngineHost], handed: Mapping[str, tuple[str, int]]):
        self._host, self._handed = host, handed
        self.owned: dict[str, AgentRecord] = {}  # the offered nodes it answers for (no pod of a run on them)
        self.offers: dict[str, NodeOffer] = {}  # the last reading of every node (what a pod there asks for)

    def read(self, offers: list[NodeOffer]) -> None:
        """Registers each offered node it answers for (again when its slots changed); a node no longer offered
        and holding nothing is lost, saying why."""
        self.offers = {o.name: o for o in offers}
        host, now = self._host(), time.time()
        offered = {o.name: o for o in offers if o.offered}
        for name, offer in offered.items():
            if name in self._handed:
                continue
            record = AgentRecord(name, offer.slots, (), tuple(Gpu(i, f"{name}/gpu{i}") for i in range(offer.gpus)))
            if self.owned.get(name) != record:
                host.register_node(record, (), (), now, watched=False, held_elsewhere=offer.taken)
                self.owned[name] = record
            else:
                host.node_held_elsewhere(name, offer.taken, now)
        for name, offer in self.offers.items():  # cordoned (a drain): still known, nothing free until it is back
            if offer.why_not == "cordoned" and name in self.owned and name not in self._handed:
                host.node_held_elsewhere(name, self._taken(name), now)
        for name in [n for n in self.owned if n not in offered and n not in self._handed and not self._cordoned(n)]:
            if host.holds(name):
                continue  # placed meanwhile: its run decides
            why = self.offers[name].why_not if name in self.offers else "gone from the cluster"
            host.node_withdrawn(name, f"node {name} is no longer offered by Kubernetes ({why})", now)
            del self.owned[name]
            log.info("kubernetes: node %s withdrawn: %s", name, why)

    def heartbeat(self, now: float) -> dict[tuple[str, int], set[str]]:
        """Heartbeats for each node it answers for; returns the runs whose nodes ask to lease ports there."""
        wanted: dict[tuple[str, int], set[str]] = {}
        host = self._host()
        for name, record in list(self.owned.items()):
            if name in self._handed:
                continue
            work = host.node_report(AgentReport(name, (), (), {}, {}), now)
            if work is None:
                host.register_node(record, (), (), now, watched=False, held_elsewhere=self._taken(name))
                continue
            for job_id, _ in work.check_ports:
                wanted.setdefault((job_id, work.attempts.get(job_id, 0)), set()).add(name)
        return wanted

    def give_back(self, name: str) -> None:
        """The node's run pod is gone: it answers for the node again (what that run left there is reconciled: a
        run still STARTED there fails, one RELEASING is freed), if the cluster still offers it; a node cordoned
        meanwhile (a drain) is withdrawn by the next reading instead, never offered to the next job."""
        record = self.owned.get(name)
        offer = self.offers.get(name)
        if record is not None and offer is not None and (offer.offered or self._cordoned(name)):
            self._host().register_node(record, (), (), time.time(), watched=False, held_elsewhere=self._taken(name))

    def _cordoned(self, name: str) -> bool:
        return getattr(self.offers.get(name), "why_not", "") == "cordoned"

    def _taken(self, name: str) -> int:
        """Its slots held elsewhere: other workloads', or all of them while it is cordoned."""
        offer = self.offers.get(name)
        if offer is None:
            return 0
        return offer.slots if self._cordoned(name) else offer.taken if offer.offered else 0

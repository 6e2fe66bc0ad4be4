"""The agent's side of the heartbeat wire: register, heartbeat and wait for work with typed values in
and out (cluster/shared/work.py converts). The agent's loop never sees a protobuf message; the outbox
(cluster/agent/outbox.py) is the other edge, for what the agent ships."""

from __future__ import annotations

import dataclasses

from cluster.agent.beacon import BeaconPlan
from cluster.shared.model import AgentRecord
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client
from cluster.shared.work import AgentReport, RunningJob, Work, registration_to_pb, report_to_pb, work_from_pb


@dataclasses.dataclass(frozen=True)
class WorkNotice:
    """A WaitForWork answer: `version` differs from the one seen: heartbeat now; `held` False: the
    coordinator had no waiting slot free (poll again later, not at once)."""

    version: int
    held: bool


@dataclasses.dataclass(frozen=True)
class Registration:
    heartbeat_interval: float  # 0: the coordinator named none
    metrics_certificate: bytes  # signed for the request's CSR (b"": none)
    beacons: BeaconPlan | None  # None: prove it alive with heartbeats


class CoordinatorLink:
    def __init__(self, client: Client, agent: str):
        self.client, self.agent = client, agent

    def register(self, record: AgentRecord, running: tuple[RunningJob, ...], leased_jobs: tuple[str, ...],
                 metrics_address: str = "", metrics_csr: bytes = b"", beacons: bool = False) -> Registration:
        """`beacons`: ask for liveness beacons (the answer's plan is None when the coordinator has none)."""
        request = registration_to_pb(record, running, leased_jobs)
        request.agent.metrics_address = metrics_address
        request.metrics_csr = metrics_csr
        request.beacons = beacons
        response = self.client.call(self.client.agents.Register, request)
        plan = None
        if beacons and response.beacon_port and response.beacon_key:
            host = self.client.address.rsplit(":", 1)[0].strip("[]")
            plan = BeaconPlan(host, response.beacon_port, response.beacon_key, response.beacon_nonce,
                              response.beacon_interval or 1.0)
        return Registration(response.heartbeat_interval, response.metrics_certificate, plan)

    def heartbeat(self, report: AgentReport, beacon_nonce: bytes = b"") -> tuple[Work | None, float]:
        """(the work, the heartbeat interval; 0: unchanged). Work None: register again. `beacon_nonce`: the
        registration it beacons under (the coordinator counts those beacons from then on)."""
        request = report_to_pb(report)
        request.beacon_nonce = beacon_nonce
        return work_from_pb(self.client.call(self.client.agents.Heartbeat, request))

    def wait_for_work(self, seen: int, wait: float) -> WorkNotice:
        """Long polls for new work."""
        response = self.client.call(self.client.agents.WaitForWork, pb.WaitForWorkRequest(
            agent=self.agent, seen=seen, wait_ms=int(wait * 1000)), timeout=wait + 10)
        return WorkNotice(response.version, response.held)

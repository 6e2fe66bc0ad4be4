"""An agent's Prometheus /metrics (`tfdist agent --metrics-listen HOST:PORT`): this node's GPUs as it samples
them, its slots and jobs, and each job's workers' CPU time and resident memory (docs/observability.md).

Served by cluster/shared/metrics_http.py over HTTPS with a certificate the coordinator signed at
registration; the agent holds no secret to verify a scraper's token with, so it asks the coordinator
(CheckScrapeToken) and remembers the answer briefly: an accepted token ACCEPTED_FOR seconds, a refused
one REFUSED_FOR, at most MAX_CACHED tokens. A coordinator that does not answer means 503 naming it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import grpc
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from cluster.shared.credentials import Principal
from cluster.shared.metrics_http import MetricsEndpoint, certificate_request
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client, ClientError
from cluster.shared.work import NodeUsage
from tfdist.errors import PermissionDeniedError, UnavailableError, UserError

log = logging.getLogger("tfdist.agent")

ACCEPTED_FOR = 60.0
REFUSED_FOR = 5.0
MAX_CACHED = 256
CHECK_TIMEOUT = 5.0


class ScraperCheck:
    """Who a token names, as the coordinator says (cached)."""

    def __init__(self, client: Client, agent: str, clock=time.monotonic):
        self.client, self.agent, self.clock = client, agent, clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Principal | None, str]] = {}  # token -> (until, principal, refusal)

    def __call__(self, token: str) -> Principal | None:
        now = self.clock()
        with self._lock:
            cached = self._cache.get(token)
        if cached is not None and cached[0] > now:
            return self._answer(cached)
        try:
            response = self.client.call(self.client.agents.CheckScrapeToken,
                                        pb.CheckScrapeTokenRequest(agent=self.agent, token=token),
                                        timeout=CHECK_TIMEOUT)
            entry = (now + ACCEPTED_FOR, Principal(response.kind, response.name), "")
        except ClientError as e:
            if e.code == grpc.StatusCode.UNAUTHENTICATED:
                entry = (now + REFUSED_FOR, None, "")
            elif e.code == grpc.StatusCode.PERMISSION_DENIED:
                entry = (now + REFUSED_FOR, None, str(e))
            else:
                raise UnavailableError(f"the coordinator at {self.client.address} did not say who this token is: {e}; "
                                       "try again when it answers") from None
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                for key in [k for k, v in self._cache.items() if v[0] <= now] or list(self._cache)[:MAX_CACHED // 2]:
                    del self._cache[key]
            self._cache[token] = entry
        return self._answer(entry)

    @staticmethod
    def _answer(entry) -> Principal | None:
        if entry[2]:
            raise PermissionDeniedError(entry[2])
        return entry[1]


class NodeCollector:
    """Gauges of this node at scrape time."""

    def __init__(self, node: str, slots: int, gpus: tuple[int, ...], usage: Callable[[], NodeUsage | None],
                 jobs: Callable[[], list[str]], failures: Callable[[], int]):
        self.node, self.slots, self.gpus = node, slots, gpus
        self.usage, self.jobs, self.failures = usage, jobs, failures

    def collect(self):
        node = self.node
        slots = GaugeMetricFamily("tfdist_agent_slots", "The slots this agent offers (GPUs, or CPU worker slots).",
                                  labels=["node"])
        slots.add_metric([node], self.slots)
        yield slots
        running = GaugeMetricFamily("tfdist_agent_jobs_running", "Jobs with workers on this node.", labels=["node"])
        running.add_metric([node], len(self.jobs()))
        yield running
        failures = CounterMetricFamily("tfdist_agent_heartbeat_failures", "Heartbeats the coordinator did not "
                                       "answer.", labels=["node"])
        failures.add_metric([node], self.failures())
        yield failures
        sample = self.usage()
        util = GaugeMetricFamily("tfdist_gpu_utilization_ratio", "Each GPU's utilisation (0-1) over the driver's "
                                 "last sample period.", labels=["node", "gpu"])
        used = GaugeMetricFamily("tfdist_gpu_memory_used_bytes", "Each GPU's memory in use.", labels=["node", "gpu"])
        total = GaugeMetricFamily("tfdist_gpu_memory_total_bytes", "Each GPU's memory.", labels=["node", "gpu"])
        cpu = CounterMetricFamily("tfdist_job_worker_cpu_seconds", "CPU time (user + system) of a job's workers "
                                  "and their children on this node.", labels=["job_id", "node"])
        rss = GaugeMetricFamily("tfdist_job_worker_resident_bytes", "Resident memory of a job's workers and their "
                                "children on this node.", labels=["job_id", "node"])
        procs = GaugeMetricFamily("tfdist_job_worker_processes", "Processes of a job's workers on this node.",
                                  labels=["job_id", "node"])
        if sample is not None:
            for g in sample.gpus:
                util.add_metric([node, str(g.index)], g.utilization)
                used.add_metric([node, str(g.index)], g.memory_used_bytes)
                total.add_metric([node, str(g.index)], g.memory_total_bytes)
            for j in sample.jobs:
                cpu.add_metric([j.job_id, node], j.cpu_seconds)
                rss.add_metric([j.job_id, node], j.rss_bytes)
                procs.add_metric([j.job_id, node], j.processes)
        if self.gpus:  # a CPU node has no GPU series at all
            yield from (util, used, total)
        yield from (cpu, rss, procs)


def exposition(collector: NodeCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


class NodeMetrics:
    """This node's /metrics server, from `--metrics-listen` to stop: the address is checked and a key made at
    once (a taken address is said before registering); it is served once the coordinator signed the key's
    request at registration (plain HTTP in a plaintext cluster; none with site certificates, which give the
    coordinator no CA key to sign with)."""

    def __init__(self, name: str, listen: str | None, plaintext: bool):
        self.name, self.listen, self.plaintext = name, listen, plaintext
        self.endpoint: MetricsEndpoint | None = None
        self._key = self.csr = b""
        if listen:
            MetricsEndpoint(listen, bytes, lambda token: None, None, "tfdist agent --metrics-listen").stop()
            self._key, self.csr = certificate_request(name)

    def address(self) -> str:
        """HOST:PORT of this node's /metrics, as the coordinator lists it ("": none)."""
        if self.endpoint is not None:
            return self.endpoint.address
        return self.listen or ""

    def serve(self, certificate: bytes, client: Client, collector: NodeCollector) -> None:
        if not self.listen or self.endpoint is not None:
            return
        if self.plaintext:
            tls = None
        elif certificate:
            tls = (certificate, self._key)
        else:
            log.error("--metrics-listen %s: the coordinator signed no certificate for this node's /metrics (its "
                      "cluster uses site certificates, without a CA key to sign with); /metrics is not served",
                      self.listen)
            self.listen = None
            return
        try:
            self.endpoint = MetricsEndpoint(self.listen, lambda: exposition(collector), ScraperCheck(client, self.name),
                                            tls, f"agent {self.name}'s /metrics").start()
        except UserError as e:  # taken since the agent started
            log.error("%s", e)
            self.listen = None
            return
        log.info("Prometheus metrics on %s", self.endpoint.url)

    def stop(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()

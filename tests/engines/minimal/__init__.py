"""A whole engine written only for the tests: one node, `minimal`, whose workers run on this machine through
the agent's executor (cluster/agent/node_runs.py), its output handed to the job side as it comes. It proves
that an engine is one package and one registry line (tests/integration/test_engine_contract.py registers
it: `ENGINES["minimal"] = "tests.engines.minimal"`) and passes the contract suite every engine passes."""

from __future__ import annotations

import dataclasses
import threading
import time

from cluster.agent.node_runs import NodeRuns, Shipping
from cluster.coordinator.engine import EngineBase, EngineHost
from cluster.engines import EngineKind
from cluster.shared.command_args import arg, integer
from cluster.shared.model import Address, AgentRecord, LogLine
from cluster.shared.work import AgentReport

NODE, LOOPBACK = "minimal", Address("127.0.0.1", 8, "lo")


@dataclasses.dataclass(frozen=True)
class MinimalOptions:
    slots: int = 2
    places: bool = False  # True: it places gangs itself (whoever drives it answers each request it is handed)


class MinimalEngine(EngineBase):
    name = "minimal"

    def __init__(self, options: MinimalOptions):
        self.slots, self.host, self.wake, self.stop = options.slots, None, threading.Event(), threading.Event()
        self.places, self.requests = options.places, []  # the runs handed to it to place (GangRequest)
        self.runs = NodeRuns(NODE, [LOOPBACK], Shipping(self._line, self._metric, self._exit, lambda job: None,
                                                        lambda job: None), changed=self.wake.set)

    def attach(self, host: EngineHost) -> None:
        self.host = host
        host.register_node(AgentRecord(NODE, self.slots, (LOOPBACK,), ()), (), (), time.time(), watched=False)
        host.on_work_changed(lambda nodes: self.wake.set())
        threading.Thread(target=self._loop, name="minimal-engine", daemon=True).start()

    @property
    def places_gangs(self) -> bool:
        return self.places

    def place(self, request) -> None:
        self.requests.append(request)

    def _loop(self) -> None:
        while not self.stop.is_set():  # its verbs, read whenever its node's work changed (or each second)
            report = AgentReport(NODE, self.runs.running(), self.runs.leased(), self.runs.take_port_results(), {})
            work = self.host.node_report(report, time.time())
            if work is not None:
                self.runs.apply(work)
            if work is None or not work.check_ports:
                self.wake.wait(1.0)
                self.wake.clear()

    def _line(self, job: str, rank: int, stream: str, text: str) -> None:
        self.host.push_logs(NODE, job, [LogLine(rank, stream, text, time.time())])

    def _metric(self, job: str, row) -> None:
        self.host.push_metrics(NODE, job, [row])

    def _exit(self, job: str, exit_) -> None:
        self.host.report_exit(NODE, job, exit_, time.time())

    def close(self, timeout: float) -> None:
        self.runs.stop_all()
        self.runs.wait_idle(timeout)
        self.stop.set()
        self.wake.set()


def create(options: MinimalOptions) -> MinimalEngine:
    return MinimalEngine(options)


KIND = EngineKind("minimal", "the tests' own engine: one node on this machine", MinimalOptions, create,
                  flags=(arg("--slots", type=integer, metavar="N", default=2, help="its node's slots"),))

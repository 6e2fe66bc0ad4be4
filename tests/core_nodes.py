"""Scripted agents for the coordinator's in-process tests: each answers the work the coordinator derives
(port checks, probes, starts and stops) the way `tfdist agent` does, on a real core and a real SQLite store
(tests/agent_core.py). The fixtures `core` and `nodes` come from here."""


import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import Settings
from cluster.coordinator.views import job_view
from cluster.shared.config import ExperimentConfig
from cluster.shared.work import AgentReport, ProbeFailure, RunningJob
from cluster.shared.model import Address, AgentRecord, Gpu, JobSpec, WorkerExit
from cluster.coordinator.store import SqliteStore

ADDR = {"a1": (Address("198.18.0.2", 24, "eth0"),),
        "a2": (Address("198.18.0.3", 24, "eth0"), Address("10.9.0.3", 16, "eth1"))}


SUBMISSION_FIELDS = ("startup_timeout", "submission_id", "priority")


def spec(slots, cmd=("python", "train.py"), distribution_mode="mwms", environment=None, **extra):
    """A submitted job: config fields by their config names, how it was submitted by JobSpec's."""
    submission = {k: extra.pop(k) for k in SUBMISSION_FIELDS if k in extra}
    config = ExperimentConfig(name="t", entrypoint=tuple(cmd), slots_per_trial=slots, distribution_mode=distribution_mode,
                              hyperparameters={"global_batch_size": 8}, environment_variables=environment or {}, **extra)
    return JobSpec(config, working_dir="/w", **submission)


class Node:
    """A scripted agent: answers port checks and probes (as told), starts and stops what it is told to."""

    def __init__(self, core, name, slots=2, gpus=()):
        self.core, self.name = core, name
        self.record = AgentRecord(name, len(gpus) or slots, ADDR.get(name, (Address("198.18.0.9", 24),)),
                                  tuple(Gpu(i, f"GPU-{name}-{i}") for i in gpus))
        self.leased, self.running, self.started = set(), {}, {}
        self.port_answers, self.probe_answers = {}, {}
        self.busy_ports, self.unreachable, self.join = set(), [], True

    def _running(self):
        return tuple(RunningJob(j, tuple(r), tuple(r), attempt=self.started[j].attempt if j in self.started else 0)
                     for j, r in self.running.items())

    def register(self, now=0):
        self.core.register(self.record, self._running(), self.leased, now)

    def beat(self, now):
        ports, self.port_answers = self.port_answers, {}
        probes, self.probe_answers = self.probe_answers, {}
        report = AgentReport(self.name, self._running(), tuple(self.leased - set(self.running)),
                             {j: tuple(busy) for j, busy in ports.items()},
                             {j: tuple(ProbeFailure(*f) for f in failures) for j, failures in probes.items()})
        work = self.core.heartbeat(report, now)
        if work is None:
            return None
        for job_id, leased_ports in work.check_ports:
            busy = [p for p in leased_ports if p in self.busy_ports]
            self.port_answers[job_id] = busy
            if not busy:
                self.leased.add(job_id)
        for probe in work.probes:
            self.probe_answers[probe.job_id] = [(*t, "refused") for t in probe.targets if t[0] in self.unreachable]
        for task in work.start:
            self.started[task.job_id] = task
            self.running[task.job_id] = [p.rank for p in task.processes] if self.join else []
        for job_id in work.stop_jobs:
            self.running.pop(job_id, None)
            self.leased.discard(job_id)
        return work

    def finish(self, job_id, now, code=0):
        """Every rank of the job here exits with `code`."""
        task = self.started[job_id]
        for p in task.processes:
            self.core.report_exit(self.name, job_id, WorkerExit(p.rank, self.name, code, attempt=task.attempt), now)
        self.running.pop(job_id, None)
        self.leased.discard(job_id)


def drive(nodes, now, rounds=8):
    for _ in range(rounds):
        for n in nodes:
            n.beat(now)


@pytest.fixture
def core(tmp_path):
    return AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(lost_after=10, port_range=(30000, 30009),
                                                                      startup_timeout=60))


@pytest.fixture
def nodes(core):
    made = [Node(core, "a1"), Node(core, "a2")]
    for n in made:
        n.register()
    return made


def state(core, job_id):
    return job_view(core, job_id).job.state

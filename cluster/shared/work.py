"""What the coordinator and an agent tell each other on a heartbeat, as typed values both sides share,
and the one place they cross the wire.

The answer (`Work`: ports to check, peers to probe, workers to start, jobs to stop) and the report
(`AgentReport`: what runs, leased ports, port and probe results, progress), plus a worker's exit and a
metric row as the agent ships them. `*_to_pb` / `*_from_pb` convert at each side's edge; nothing else
of either side touches a protobuf message of these."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from cluster.shared.model import Address, AgentRecord, Gpu, MetricRow, WorkerExit
from cluster.shared.modes.base import ProcessPlan
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

PROBE_TIMEOUT = 3.0  # seconds a node waits for each peer's port to accept a connection


# ---------------------------------------------------------------- the coordinator's answer
@dataclasses.dataclass(frozen=True)
class ProbeTask:
    job_id: str
    targets: tuple[tuple[str, str, int], ...]  # (peer agent, address, port)
    timeout: float


@dataclasses.dataclass(frozen=True)
class StartTask:
    job_id: str
    working_dir: str
    command: tuple[str, ...]
    processes: tuple[ProcessPlan, ...]
    failure_grace: float
    store_port: int = 0  # >0: this node serves the job's key-value store on it
    attempt: int = 0  # which run of the job (an agent starts each run once)
    store_secret: str = dataclasses.field(default="", repr=False)  # the run's store secret (every node's workers)


@dataclasses.dataclass
class Work:
    """What one heartbeat answers an agent."""

    check_ports: list[tuple[str, tuple[int, ...]]] = dataclasses.field(default_factory=list)
    probes: list[ProbeTask] = dataclasses.field(default_factory=list)
    start: list[StartTask] = dataclasses.field(default_factory=list)
    stop_jobs: list[str] = dataclasses.field(default_factory=list)
    stop_grace: dict[str, float] = dataclasses.field(default_factory=dict)
    dump_stacks: list[str] = dataclasses.field(default_factory=list)
    preempt: list[str] = dataclasses.field(default_factory=list)  # jobs whose store must carry a preemption request
    attempts: dict[str, int] = dataclasses.field(default_factory=dict)  # job -> its current run, for port checks
    version: int = 0  # the version of the agent's work this reflects (its beacons carry it back)
    beacon_port: int = 0  # where its beacons go (0: unchanged, or it beacons not)


def of_run(work: Work, job_id: str, attempt: int) -> Work:
    """The part of `work` for one run of one job (`attempt`): what an agent started for that run alone
    carries out (a Kubernetes pod's: the node is the pod's only for its gang's run). Stops of the job are
    kept whatever the attempt (a run being replaced is stopped too)."""
    current = work.attempts.get(job_id, attempt) == attempt
    return Work(check_ports=[c for c in work.check_ports if c[0] == job_id and current],
                probes=[p for p in work.probes if p.job_id == job_id and current],
                start=[t for t in work.start if t.job_id == job_id and t.attempt == attempt],
                stop_jobs=[j for j in work.stop_jobs if j == job_id],
                stop_grace={j: g for j, g in work.stop_grace.items() if j == job_id},
                dump_stacks=[j for j in work.dump_stacks if j == job_id],
                preempt=[j for j in work.preempt if j == job_id],
                attempts={j: a for j, a in work.attempts.items() if j == job_id},
                version=work.version, beacon_port=work.beacon_port)


# ---------------------------------------------------------------- the agent's report
@dataclasses.dataclass(frozen=True)
class RankProgress:
    rank: int
    step: int
    age: float  # seconds since the rank last reported, on the agent's clock


@dataclasses.dataclass(frozen=True)
class RunningJob:
    """A job whose workers run (or are being reaped) on the reporting node."""

    job_id: str
    ranks: tuple[int, ...]
    joined_ranks: tuple[int, ...] = ()  # called tfdist.init(), listen on their port, or reached the store
    progress: tuple[RankProgress, ...] = ()  # ranks that report training progress (the step watchdog)
    attempt: int = 0


@dataclasses.dataclass(frozen=True)
class ProbeFailure:
    peer: str
    address: str
    port: int
    error: str


@dataclasses.dataclass(frozen=True)
class GpuUsage:
    index: int  # nvidia-smi's index
    utilization: float  # 0..1: the share of the driver's last sample period a kernel ran
    memory_used_bytes: int
    memory_total_bytes: int


@dataclasses.dataclass(frozen=True)
class JobUsage:
    job_id: str
    cpu_seconds: float  # user + system CPU of the job's workers on the node (and their children), summed
    rss_bytes: int  # their resident memory, summed
    processes: int


@dataclasses.dataclass(frozen=True)
class NodeUsage:
    """What an agent measured on its node: its GPUs (none on a CPU node) and each job's workers."""

    time: float = 0.0  # when sampled (agent clock; 0: never)
    gpus: tuple[GpuUsage, ...] = ()
    jobs: tuple[JobUsage, ...] = ()


@dataclasses.dataclass(frozen=True)
class AgentReport:
    """What one heartbeat tells the coordinator."""

    agent: str
    running: tuple[RunningJob, ...] = ()
    leased_jobs: tuple[str, ...] = ()  # jobs whose ports this agent holds (checked, not started)
    port_results: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # job -> busy ports
    probe_results: Mapping[str, tuple[ProbeFailure, ...]] = dataclasses.field(default_factory=dict)  # () all answered
    usage: NodeUsage | None = None  # the node's latest sample (None: the agent sent none)


# ---------------------------------------------------------------- heartbeat answer <-> wire
def work_to_pb(work: Work | None, interval: float) -> pb.HeartbeatResponse:
    """`work` None: the coordinator does not know this agent, which must register again."""
    if work is None:
        return pb.HeartbeatResponse(reregister=True)
    return pb.HeartbeatResponse(
        check_ports=[pb.PortCheck(job_id=j, ports=list(ports), attempt=work.attempts.get(j, 0))
                     for j, ports in work.check_ports],
        probe=[pb.Probe(job_id=p.job_id, timeout=p.timeout,
                        targets=[pb.ProbeTarget(peer=t[0], address=t[1], port=t[2]) for t in p.targets])
               for p in work.probes],
        start=[pb.StartTask(job_id=s.job_id, working_dir=s.working_dir, failure_grace=s.failure_grace,
                            store_port=s.store_port, attempt=s.attempt, store_secret=s.store_secret, workers=[
            pb.WorkerProcess(rank=p.rank, command=list(s.command), env=dict(p.env), port=p.port, gpus=list(p.gpus),
                             expendable=p.expendable, node_rank=p.node_rank, local_rank=p.local_rank,
                             local_size=p.local_size, replicas=p.replicas, role=p.role)
            for p in s.processes]) for s in work.start],
        stop_jobs=work.stop_jobs, stop_grace=work.stop_grace, heartbeat_interval=interval,
        dump_stacks=work.dump_stacks, preempt=work.preempt, work_version=work.version,
        beacon_port=work.beacon_port)


def work_from_pb(response: pb.HeartbeatResponse) -> tuple[Work | None, float]:
    """(the work, the heartbeat interval; 0: unchanged). Work None: register again."""
    if response.reregister:
        return None, response.heartbeat_interval
    return Work(
        check_ports=[(c.job_id, tuple(c.ports)) for c in response.check_ports],
        probes=[ProbeTask(p.job_id, tuple((t.peer, t.address, t.port) for t in p.targets), p.timeout)
                for p in response.probe],
        start=[_start_from_pb(s) for s in response.start],
        stop_jobs=list(response.stop_jobs), stop_grace=dict(response.stop_grace),
        dump_stacks=list(response.dump_stacks), preempt=list(response.preempt),
        attempts={c.job_id: c.attempt for c in response.check_ports},
        version=response.work_version, beacon_port=response.beacon_port,
    ), response.heartbeat_interval


def _start_from_pb(task: pb.StartTask) -> StartTask:
    command = tuple(task.workers[0].command) if task.workers else ()
    return StartTask(job_id=task.job_id, working_dir=task.working_dir, command=command,
                     processes=tuple(_process_from_pb(w) for w in task.workers),
                     failure_grace=task.failure_grace, store_port=task.store_port, attempt=task.attempt,
                     store_secret=task.store_secret)


def _process_from_pb(w: pb.WorkerProcess) -> ProcessPlan:
    """A coordinator older than the layout fields sends none: a one-slot worker alone on its node."""
    return ProcessPlan(rank=w.rank, node_rank=w.node_rank, local_rank=w.local_rank, local_size=w.local_size or 1,
                       port=w.port, gpus=tuple(w.gpus), replicas=w.replicas or 1, env=dict(w.env),
                       role=w.role or "worker", expendable=w.expendable)


# ---------------------------------------------------------------- agent report <-> wire
def running_to_pb(job: RunningJob) -> pb.RunningTask:
    return pb.RunningTask(job_id=job.job_id, ranks=list(job.ranks), joined_ranks=list(job.joined_ranks),
                          progress=[pb.RankProgress(rank=p.rank, step=p.step, age=p.age) for p in job.progress],
                          attempt=job.attempt)


def running_from_pb(task: pb.RunningTask) -> RunningJob:
    return RunningJob(task.job_id, tuple(task.ranks), tuple(task.joined_ranks),
                      tuple(RankProgress(p.rank, p.step, p.age) for p in task.progress), task.attempt)


def report_to_pb(report: AgentReport) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(
        agent=report.agent, running=[running_to_pb(j) for j in report.running], leased_jobs=list(report.leased_jobs),
        port_results=[pb.PortCheckResult(job_id=j, busy_ports=list(b)) for j, b in report.port_results.items()],
        probe_results=[pb.ProbeResult(job_id=j, failures=[
            pb.ProbeFailure(target=pb.ProbeTarget(peer=f.peer, address=f.address, port=f.port), error=f.error)
            for f in failures]) for j, failures in report.probe_results.items()],
        usage=usage_to_pb(report.usage) if report.usage is not None else None)


def report_from_pb(request: pb.HeartbeatRequest) -> AgentReport:
    return AgentReport(
        agent=request.agent, running=tuple(running_from_pb(t) for t in request.running),
        leased_jobs=tuple(request.leased_jobs),
        port_results={r.job_id: tuple(r.busy_ports) for r in request.port_results},
        probe_results={r.job_id: tuple(ProbeFailure(f.target.peer, f.target.address, f.target.port, f.error)
                                       for f in r.failures) for r in request.probe_results},
        usage=usage_from_pb(request.usage) if request.HasField("usage") else None)


def usage_to_pb(usage: NodeUsage) -> pb.NodeUsage:
    return pb.NodeUsage(
        time=usage.time,
        gpus=[pb.GpuUsage(index=g.index, utilization=g.utilization, memory_used_bytes=g.memory_used_bytes,
                          memory_total_bytes=g.memory_total_bytes) for g in usage.gpus],
        jobs=[pb.JobUsage(job_id=j.job_id, cpu_seconds=j.cpu_seconds, rss_bytes=j.rss_bytes, processes=j.processes)
              for j in usage.jobs])


def usage_from_pb(usage: pb.NodeUsage) -> NodeUsage:
    return NodeUsage(usage.time,
                     tuple(GpuUsage(g.index, g.utilization, g.memory_used_bytes, g.memory_total_bytes)
                           for g in usage.gpus),
                     tuple(JobUsage(j.job_id, j.cpu_seconds, j.rss_bytes, j.processes) for j in usage.jobs))


def agent_to_pb(record: AgentRecord) -> pb.AgentInfo:
    return pb.AgentInfo(name=record.name, slots=record.slots, gpu=record.gpu,
                        gpus=[pb.Gpu(index=g.index, uuid=g.uuid, name=g.name) for g in record.gpus],
                        addresses=[pb.Address(ip=a.ip, prefix_len=a.prefix_len, interface=a.interface)
                                   for a in record.addresses])


def agent_from_pb(info: pb.AgentInfo) -> AgentRecord:
    return AgentRecord(name=info.name, slots=info.slots,
                       addresses=tuple(Address(x.ip, x.prefix_len, x.interface) for x in info.addresses),
                       gpus=tuple(Gpu(g.index, g.uuid, g.name) for g in info.gpus))


def registration_to_pb(record: AgentRecord, running: tuple[RunningJob, ...],
                       leased_jobs: tuple[str, ...]) -> pb.RegisterRequest:
    return pb.RegisterRequest(agent=agent_to_pb(record), running=[running_to_pb(j) for j in running],
                              leased_jobs=list(leased_jobs))


# ---------------------------------------------------------------- what the agent ships <-> wire
def exit_to_pb(exit_: WorkerExit) -> pb.WorkerExit:
    """The wire has no time: the coordinator stamps an exit as it arrives."""
    return pb.WorkerExit(rank=exit_.rank, agent=exit_.agent, exit_code=exit_.exit_code,
                         last_lines=list(exit_.last_lines), reason=exit_.reason, tolerated=exit_.tolerated,
                         attempt=exit_.attempt)


def exit_from_pb(exit_: pb.WorkerExit, agent: str = "") -> WorkerExit:
    return WorkerExit(exit_.rank, agent or exit_.agent, exit_.exit_code, tuple(exit_.last_lines),
                      reason=exit_.reason, tolerated=exit_.tolerated, attempt=exit_.attempt)


def metric_to_pb(row: MetricRow) -> pb.Metric:
    return pb.Metric(rank=row.rank, step=row.step, name=row.name, value=row.value, time=row.time, note=row.note)


def metric_from_pb(metric: pb.Metric) -> MetricRow:
    return MetricRow(metric.rank, metric.step, metric.name, metric.value, metric.time, metric.note)

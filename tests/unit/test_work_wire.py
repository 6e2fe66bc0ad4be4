"""The heartbeat's typed values cross the wire and come back equal (cluster/shared/work.py converters)."""

from cluster.shared.model import Address, AgentRecord, Gpu, MetricRow, WorkerExit
from cluster.shared.modes.base import ProcessPlan
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.work import (AgentReport, ProbeFailure, ProbeTask, RankProgress, RunningJob, StartTask, Work,
                                 agent_from_pb, agent_to_pb, exit_from_pb, exit_to_pb, metric_from_pb, metric_to_pb,
                                 registration_to_pb, report_from_pb, report_to_pb, running_from_pb, work_from_pb,
                                 work_to_pb)
from tfdist import envvars


def _process(rank, node_rank=1, local_rank=0, local_size=2, role="worker", expendable=False):
    env = {envvars.RANK: str(rank), envvars.NODE_RANK: str(node_rank), envvars.LOCAL_RANK: str(local_rank),
           envvars.LOCAL_SIZE: str(local_size), envvars.LOCAL_SLOTS: "2", envvars.ROLE: role, "A": "b"}
    return ProcessPlan(rank=rank, node_rank=node_rank, local_rank=local_rank, local_size=local_size, port=20000 + rank,
                       gpus=(2 * local_rank, 2 * local_rank + 1), replicas=2, env=env, role=role, expendable=expendable)


WORK = Work(
    check_ports=[("1-a", (20001, 20002)), ("2-b", (20005,))],
    probes=[ProbeTask("1-a", (("n2", "10.0.0.2", 20003), ("n3", "10.0.0.3", 20004)), 2.5)],
    start=[StartTask("1-a", "/work", ("python", "train.py", "--x"),
                     (_process(2), _process(3, local_rank=1, role="ps", expendable=True)), 1.5, store_port=20009,
                     attempt=2),
           StartTask("3-c", "", (), (), 0.0)],
    stop_jobs=["4-d"], stop_grace={"4-d": 0.5}, dump_stacks=["5-e"], preempt=["6-f"],
    attempts={"1-a": 2, "2-b": 0})


def test_work_crosses_the_wire_and_back_equal():
    work, interval = work_from_pb(work_to_pb(WORK, 2.5))
    assert (work, interval) == (WORK, 2.5)


def test_a_wire_answer_crosses_into_work_and_back_equal():
    message = work_to_pb(WORK, 1.0)
    again = work_to_pb(*work_from_pb(pb.HeartbeatResponse.FromString(message.SerializeToString())))
    assert again == message


def test_no_work_means_register_again():
    assert work_to_pb(None, 3.0) == pb.HeartbeatResponse(reregister=True)
    assert work_from_pb(pb.HeartbeatResponse(reregister=True)) == (None, 0.0)


def test_a_process_without_layout_variables_gets_defaults():
    message = pb.HeartbeatResponse(start=[pb.StartTask(job_id="j", workers=[
        pb.WorkerProcess(rank=4, command=["x"], env={"A": "b", envvars.NODE_RANK: "bad"}, port=7)])])
    (task,), = [work_from_pb(message)[0].start]
    assert task.command == ("x",)
    assert task.processes == (ProcessPlan(rank=4, node_rank=0, local_rank=0, local_size=1, port=7, gpus=(),
                                          replicas=1, env={"A": "b", envvars.NODE_RANK: "bad"}),)


REPORT = AgentReport(
    agent="n1",
    running=(RunningJob("1-a", (0, 1), (1,), (RankProgress(0, 12, 0.5),), attempt=3), RunningJob("2-b", (4,))),
    leased_jobs=("3-c",),
    port_results={"4-d": (20001,), "5-e": ()},
    probe_results={"6-f": (ProbeFailure("n2", "10.0.0.2", 20003, "connection refused"),), "7-g": ()})


def test_the_agents_report_crosses_the_wire_and_back_equal():
    assert report_from_pb(pb.HeartbeatRequest.FromString(report_to_pb(REPORT).SerializeToString())) == REPORT


def test_registration_carries_the_node_and_what_survived():
    record = AgentRecord("n1", 2, (Address("10.0.0.1", 24, "eth0"),), (Gpu(0, "u0", "A100"), Gpu(1, "u1", "A100")))
    request = registration_to_pb(record, REPORT.running, ("3-c",))
    assert request.agent.gpu and agent_from_pb(request.agent) == record and agent_to_pb(record) == request.agent
    assert tuple(running_from_pb(t) for t in request.running) == REPORT.running
    assert list(request.leased_jobs) == ["3-c"]


def test_an_exit_and_a_metric_row_cross_the_wire():
    exit_ = WorkerExit(3, "n1", -9, ("a", "b"), reason="never joined", tolerated=True, attempt=2)
    assert exit_from_pb(pb.WorkerExit.FromString(exit_to_pb(exit_).SerializeToString())) == exit_
    assert exit_from_pb(exit_to_pb(exit_), agent="n2").agent == "n2"
    row = MetricRow(1, 7, "loss", 0.25, 123.5, note="ckpt")
    assert metric_from_pb(metric_to_pb(row)) == row


def test_a_pods_agent_takes_only_its_runs_work():
    """work.of_run: a Kubernetes pod's agent carries out its own run's part of the node's work, nothing of another
    job's nor of its job's next run (which has pods of its own); a stop of its job is kept whatever the run."""
    from cluster.shared.work import of_run

    start = lambda job, attempt: StartTask(job_id=job, working_dir="/", command=("x",), processes=(),  # noqa: E731
                                           failure_grace=1.0, store_port=0, attempt=attempt, store_secret="")
    work = Work(check_ports=[("a", (1,)), ("b", (2,))], probes=[ProbeTask("a", (), 1.0), ProbeTask("b", (), 1.0)],
                start=[start("a", 0), start("a", 1), start("b", 0)], stop_jobs=["a", "b"], stop_grace={"a": 5.0, "b": 1.0},
                dump_stacks=["b"], preempt=["a", "b"], attempts={"a": 0, "b": 0}, version=7)
    mine = of_run(work, "a", 0)
    assert mine == Work(check_ports=[("a", (1,))], probes=[ProbeTask("a", (), 1.0)], start=[start("a", 0)],
                        stop_jobs=["a"], stop_grace={"a": 5.0}, preempt=["a"], attempts={"a": 0}, version=7)
    later = of_run(work, "a", 1)  # the pod of run 1: its start, not run 0's port checks
    assert later.check_ports == [] and later.start == [start("a", 1)] and later.stop_jobs == ["a"]

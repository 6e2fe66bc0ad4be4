"""A node's start plan: every worker's exact environment and command, or every rank's failure."""

import os

from cluster.agent.gang import WorkerLaunch
from cluster.agent.start_plan import NodeFacts, StartPlan, every_rank_failed, plan_start
from cluster.shared.commands import CommandError, CommandNotRunnableError
from cluster.shared.model import Address, WorkerExit
from cluster.shared.modes.base import ProcessPlan
from cluster.shared.work import StartTask
from tfdist import envvars

NODE = NodeFacts("n1", (Address("10.0.0.1", 24, "eth0"), Address("127.0.0.1", 8, "lo")),
                 {"PATH": "/bin", "PYTHONPATH": "/mine", "A": "agent's"}, bootstrap="/tfdist/bootstrap")


def _process(rank, local_rank, port, expendable=False):
    env = {envvars.RANK: str(rank), envvars.NODE_ADDRESS: "10.0.0.1", "A": "job's",
           "NCCL_SOCKET_IFNAME": envvars.NODE_INTERFACE_PLACEHOLDER}
    return ProcessPlan(rank=rank, node_rank=1, local_rank=local_rank, local_size=2, port=port, gpus=(), replicas=1,
                       env=env, expendable=expendable)


TASK = StartTask("7-a", "/work", ("train.py", "--lr", "1"), (_process(2, 0, 20001), _process(3, 1, 20002, True)),
                 failure_grace=1.5, store_port=20009, attempt=4)


def _resolve(command, cwd):
    assert cwd == "/work"
    return ["/usr/bin/python3", *command]


def _env(rank):
    return {"PATH": "/bin", "PYTHONPATH": "/tfdist/bootstrap" + os.pathsep + "/mine", "A": "job's",
            envvars.RANK: str(rank), envvars.NODE_ADDRESS: "10.0.0.1", "NCCL_SOCKET_IFNAME": "eth0",
            envvars.READY_FILE: f"/jd/rank{rank}.ready", envvars.METRICS_FILE: f"/jd/rank{rank}.metrics",
            envvars.PROGRESS_FILE: f"/jd/rank{rank}.progress"}


def test_each_worker_gets_its_final_environment_and_the_resolved_command():
    command = ("/usr/bin/python3", "train.py", "--lr", "1")
    assert plan_start(TASK, NODE, "/jd", _resolve) == StartPlan(
        job_id="7-a", attempt=4, agent="n1", job_dir="/jd",
        workers=(WorkerLaunch(2, command, _env(2), ready_file="/jd/rank2.ready", port=20001),
                 WorkerLaunch(3, command, _env(3), ready_file="/jd/rank3.ready", port=20002, expendable=True)),
        cwd="/work", failure_grace=1.5, store=("10.0.0.1", 20009),
        metrics_files=("/jd/rank2.metrics", "/jd/rank3.metrics"))


def test_keras_patch_off_leaves_pythonpath_alone_and_an_unknown_address_fills_no_interface():
    node = NodeFacts("n1", (), {"PYTHONPATH": "/mine", "TFDIST_KERAS_PATCH": "0"}, bootstrap="/tfdist/bootstrap")
    plan = plan_start(TASK, node, "/jd", _resolve)
    assert [w.env["PYTHONPATH"] for w in plan.workers] == ["/mine", "/mine"]
    assert [w.env["NCCL_SOCKET_IFNAME"] for w in plan.workers] == ["", ""]
    bare = plan_start(TASK, NodeFacts("n1", (), {}), "/jd", _resolve)  # no bootstrap installed
    assert "PYTHONPATH" not in bare.workers[0].env


def test_a_command_that_cannot_run_fails_every_rank_with_why():
    def missing(command, cwd):
        raise CommandError("program 'nope' not found on PATH")

    plan = plan_start(TASK, NODE, "/jd", missing)
    assert not plan.can_start and plan.workers == () and plan.store is None
    assert plan.exits == (
        WorkerExit(2, "n1", 127, ("n1: program 'nope' not found on PATH",), attempt=4),
        WorkerExit(3, "n1", 127, ("n1: program 'nope' not found on PATH",), attempt=4))


def test_a_command_that_exists_but_cannot_be_executed_fails_with_126():
    def not_executable(command, cwd):
        raise CommandNotRunnableError("'train.sh' is not executable: chmod +x it or run it with its interpreter")

    plan = plan_start(TASK, NODE, "/jd", not_executable)
    assert [e.exit_code for e in plan.exits] == [126, 126]


def test_a_node_without_the_store_and_a_task_without_processes():
    plan = plan_start(StartTask("8-b", "", ("x",), (), 0.0), NODE, "/jd", _resolve)
    assert plan.can_start and plan.workers == () and plan.store is None and plan.cwd is None
    assert plan.failure_grace is None


def test_every_rank_failed_builds_one_exit_per_rank():
    assert every_rank_failed([0, 5], "n2", 1, ["why"], exit_code=1) == (
        WorkerExit(0, "n2", 1, ("why",), attempt=1), WorkerExit(5, "n2", 1, ("why",), attempt=1))

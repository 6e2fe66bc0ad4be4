"""The job store's secret from the coordinator to the workers, and where the store is served: HMAC per
run, on every node's StartTask and the wire, in each worker's environment only (Gloo's in its rendezvous
path, proven against a real store the way Gloo's HTTP client forms its URL), loopback for one-node jobs
and the job's own address otherwise."""

import hashlib
import hmac
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from cluster.agent.job_run import JobRun
from cluster.agent.job_store import JobStore
from cluster.agent.start_plan import NodeFacts, plan_start
from cluster.coordinator.nodes import work as coordinator_work
from cluster.coordinator.values import Settings
from cluster.coordinator.nodes.work import start_task, store_secret
from cluster.shared.config import parse_config
from cluster.shared.model import Address, Allocation, AllocState, Job, JobSpec, JobState
from cluster.shared.modes import NodePlacement, Placement, horovod, mwms
from cluster.shared.work import Work, work_from_pb, work_to_pb
from tests.conftest import MARKER_VAR
from tests.other_user import NOBODY
from tfdist import envvars
from tfdist.collectives import store_request

KEY = b"k" * 32


def _job(attempt=0, mode="mwms"):
    config = parse_config(f"distribution: {{mode: {mode}}}\nentrypoint: [python, train.py]")
    return Job("7-ab", 1, JobSpec(config, working_dir="/w"), JobState.RUNNING, 0.0, attempt=attempt)


def _placement(*hosts, ports_each=3):
    return Placement("7-ab", tuple(NodePlacement(f"n{i}", h, 2, tuple(range(20000 + 10 * i, 20000 + 10 * i + ports_each)))
                                   for i, h in enumerate(hosts)))


def _node(ip):
    return NodeFacts("n0", (Address(ip, 8, "lo"),), {"PATH": "/usr/bin:/bin", envvars.STORE_SECRET: "the agent's"})


def _resolve(command, cwd):
    return list(command)


def test_each_run_gets_its_own_secret_the_same_after_a_coordinator_restart():
    first = store_secret(Settings(store_key=KEY), "7-ab", 0)
    assert first == hmac.new(KEY, b"7-ab/0", hashlib.sha256).hexdigest()
    assert store_secret(Settings(store_key=KEY), "7-ab", 0) == first  # a restarted coordinator, same key
    assert len({first, store_secret(Settings(store_key=KEY), "7-ab", 1), store_secret(Settings(store_key=KEY), "8-ab", 0),
                store_secret(Settings(store_key=b"another cluster"), "7-ab", 0)}) == 4
    fallback = store_secret(Settings(), "7-ab", 0)  # no key: one made once per coordinator process
    assert fallback == hmac.new(coordinator_work._PROCESS_STORE_KEY, b"7-ab/0", hashlib.sha256).hexdigest()
    assert fallback != first and len(coordinator_work._PROCESS_STORE_KEY) == 32


def test_every_node_is_sent_the_secret_and_only_the_first_serves_the_store():
    job, settings = _job(attempt=2), Settings(store_key=KEY)
    plan = mwms.MWMS.plan(_placement("10.0.0.1", "10.0.0.2"), job.spec.config, [(), ()])
    allocs = [Allocation("7-ab", f"n{i}", i, 2, f"10.0.0.{i + 1}", (), state=AllocState.REACHABLE) for i in range(2)]
    tasks = [start_task(a, job, plan, settings) for a in allocs]
    assert [t.store_port for t in tasks] == [20002, 0]
    assert {t.store_secret for t in tasks} == {store_secret(settings, "7-ab", 2)}
    assert tasks[0].store_secret not in repr(tasks[0])
    wire = work_from_pb(work_to_pb(Work(start=tasks), 1.0))[0]
    assert wire.start == tasks  # the secret crosses the wire with the task
    assert all(tasks[0].store_secret not in v for p in plan.processes for v in p.env.values())  # not in the plan


def test_the_agent_puts_the_secret_in_each_workers_environment_only():
    job = _job(mode="horovod")
    plan = horovod.HOROVOD.plan(_placement("127.0.0.2", "127.0.0.3"), job.spec.config, [(), ()])
    allocation = Allocation("7-ab", "n0", 0, 2, "127.0.0.2", (), state=AllocState.REACHABLE)
    task = start_task(allocation, job, plan, Settings(store_key=KEY))
    started = plan_start(task, _node("127.0.0.2"), "/jd", _resolve)
    for worker in started.workers:
        assert worker.env[envvars.STORE_SECRET] == task.store_secret  # the agent's own value is not inherited
        assert worker.env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == f"127.0.0.2:20002/{task.store_secret}"
        assert task.store_secret not in " ".join(worker.command)
    assert started.store_secret == task.store_secret
    unsent = plan_start(dataclass_replace(task, store_secret=""), _node("127.0.0.2"), "/jd", _resolve)
    assert envvars.STORE_SECRET not in unsent.workers[0].env  # none sent: none inherited either; the store says why
    assert unsent.workers[0].env["HOROVOD_GLOO_RENDEZVOUS_ADDR"].endswith(envvars.STORE_SECRET_PLACEHOLDER)


def dataclass_replace(value, **changes):
    import dataclasses

    return dataclasses.replace(value, **changes)


def _gloo_request(env, scope, key, method="GET", body=b""):
    """A request as Horovod's HTTPStore makes it: URL http://<ADDR>:<PORT>/<scope>/<key>, split the way
    its HTTPRequest client splits it (host and port before the first '/', the rest is the path)."""
    url = f"http://{env['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{env['HOROVOD_GLOO_RENDEZVOUS_PORT']}/{scope}/{key}"
    rest = url.removeprefix("http://")
    domain, path = rest[:rest.index("/")], rest[rest.index("/"):]
    host, _, port = domain.partition(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return int(answer.split(b" ")[1]), answer.partition(b"\r\n\r\n")[2]


def test_a_multi_node_store_listens_on_the_jobs_address_and_gloo_reaches_it_with_the_secret():
    job = _job(mode="horovod")
    plan = horovod.HOROVOD.plan(_placement("127.0.0.2", "127.0.0.3"), job.spec.config, [(), ()])
    allocation = Allocation("7-ab", "n0", 0, 2, "127.0.0.2", (), state=AllocState.REACHABLE)
    task = dataclass_replace(start_task(allocation, job, plan, Settings(store_key=KEY)), store_port=0)
    with socket.socket() as probe:  # a free port on the job's address
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    task = dataclass_replace(task, store_port=port, processes=tuple(
        dataclass_replace(p, env={**p.env, envvars.STORE: f"127.0.0.2:{port}", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                                  "HOROVOD_GLOO_RENDEZVOUS_ADDR": f"127.0.0.2:{port}/{envvars.STORE_SECRET_PLACEHOLDER}"})
        for p in task.processes))
    started = plan_start(task, _node("127.0.0.2"), "/jd", _resolve)
    assert started.store == ("127.0.0.2", port)
    store = JobStore(*started.store, started.store_secret).start()
    try:
        assert store.address == ("127.0.0.2", port)  # the job's address, not every interface
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        env = started.workers[1].env
        assert _gloo_request(env, "global", "rank_1", "PUT", b"127.0.0.3:4242")[0] == 200
        assert _gloo_request(env, "global", "rank_1") == (200, b"127.0.0.3:4242")
        assert store.ranks_joined() == {1}
        assert store_request(env[envvars.STORE], "GET", "/global/rank_1", secret=env[envvars.STORE_SECRET]) == \
            (200, b"127.0.0.3:4242")
        wrong = {**env, "HOROVOD_GLOO_RENDEZVOUS_ADDR": f"127.0.0.2:{port}/{'0' * 64}"}
        assert _gloo_request(wrong, "global", "rank_1", "PUT", b"evil")[0] == 403
    finally:
        store.stop()


def test_a_one_node_job_serves_its_store_on_loopback_only():
    config = parse_config("distribution: {mode: mwms}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    placement = Placement("7-ab", (NodePlacement("n0", "127.0.0.2", 2, (20000, 20001, port)),))
    plan = mwms.MWMS.plan(placement, config, [()])
    assert {p.env[envvars.STORE] for p in plan.processes} == {f"127.0.0.1:{port}"}
    assert {p.env[envvars.NODE_ADDRESS] for p in plan.processes} == {"127.0.0.2"}  # the node's own address
    allocation = Allocation("7-ab", "n0", 0, 2, "127.0.0.2", (), state=AllocState.REACHABLE)
    task = start_task(allocation, _job(), plan, Settings(store_key=KEY))
    started = plan_start(task, _node("127.0.0.2"), "/jd", _resolve)
    store = JobStore(*started.store, started.store_secret).start()
    try:
        assert started.store == ("127.0.0.1", port) and store.address == ("127.0.0.1", port)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
    finally:
        store.stop()


def test_another_user_cannot_read_the_secret_from_a_running_worker(marker, tmp_path):
    job = _job()
    plan = mwms.MWMS.plan(_placement("127.0.0.1"), job.spec.config, [()])
    allocation = Allocation("7-ab", "n0", 0, 2, "127.0.0.1", (), state=AllocState.REACHABLE)
    task = start_task(allocation, job, plan, Settings(store_key=KEY))
    stop = tmp_path / "stop"
    code = (f"import os, pathlib, time\npathlib.Path(os.environ['TFDIST_READY_FILE']).touch()\n"
            f"deadline = time.monotonic() + 60\n"
            f"while not os.path.exists({str(stop)!r}) and time.monotonic() < deadline: time.sleep(0.05)\n")
    task = dataclass_replace(task, command=(sys.executable, "-c", code), store_port=0, working_dir=str(tmp_path))
    node = NodeFacts("n0", (Address("127.0.0.1", 8, "lo"),), {"PATH": "/usr/bin:/bin", MARKER_VAR: marker})
    os.mkdir(tmp_path / "job", 0o700)  # the agent makes the run's directory before it plans
    exits = []
    run = JobRun(plan_start(task, node, str(tmp_path / "job")), lambda *a: None, lambda *a: exits.append(a))
    runner = threading.Thread(target=run.run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while len(run.gang.joined_ranks()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = run.gang.process_groups()
        assert len(run.gang.joined_ranks()) == 2, f"the workers did not start within 30s: {exits}"
        for pid in pids:
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert f"{envvars.STORE_SECRET}={task.store_secret}".encode() in f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert task.store_secret.encode() not in f.read()
            read = subprocess.run([*NOBODY, "cat", f"/proc/{pid}/environ"], capture_output=True, timeout=30)
            assert read.returncode != 0 and task.store_secret.encode() not in read.stdout
    finally:
        stop.touch()
        runner.join(timeout=60)
        run.close()
    assert os.path.exists(stop)

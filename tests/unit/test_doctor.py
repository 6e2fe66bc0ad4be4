"""`tfdist doctor`: its checks as pure functions over facts, and the probes that gather the facts against
real things: a real coordinator over TLS (accepted, refused, unreachable, silent), nvidia-smi's stand-in, a
Python that hangs while importing TensorFlow."""

import dataclasses
import os
import socket
import sys

import pytest

from cluster.client import doctor
from cluster.client import doctor_checks as checks
from tests.agent_core import AgentsServer
from cluster.shared.credentials import Authority
from tests.conftest import REPO, MARKER_VAR
from tests.stand_in_nvml import StandInNvml

pytestmark = pytest.mark.timeout(120)

GOOD = checks.PythonFacts("/venv/bin/python", version="3.11.7", tfdist="/venv/lib/site-packages", bootstrap=True,
                          tensorflow="2.21.0", tensorflow_package="tensorflow-cpu", keras="3.15.1", mwms_fix=True)
CPU_NODE = checks.GpuFacts("")
PORTS = checks.PortFacts(20000, 20009, "--port-range", free=10)


def status(results, name):
    found = [r for r in results if r.name == name]
    assert len(found) == 1, results
    return found[0]


def run(py=GOOD, gpus=CPU_NODE, ports=PORTS, coordinator=checks.CoordinatorFacts(), mode="", cpus=2):
    return checks.all_checks(py, gpus, ports, coordinator, [], mode, "/venv/bin/python", cpus)


@pytest.mark.parametrize("py, gpus, mode, name, expected, words", [
    (GOOD, CPU_NODE, "", "tensorflow", checks.OK, "2.21.0 (tensorflow-cpu)"),
    (dataclasses.replace(GOOD, tensorflow="2.15.1"), CPU_NODE, "", "tensorflow", checks.PROBLEM, "tested with (2.21.x)"),
    (dataclasses.replace(GOOD, tensorflow=""), CPU_NODE, "", "tensorflow", checks.PROBLEM, "not installed"),
    (dataclasses.replace(GOOD, mwms_fix=False), CPU_NODE, "", "keras", checks.PROBLEM, "keras==3.15"),
    (GOOD, CPU_NODE, "", "tf_keras", checks.SKIPPED, "only ps mode"),
    (GOOD, CPU_NODE, "ps", "tf_keras", checks.PROBLEM, "pip install --no-deps"),
    (dataclasses.replace(GOOD, tf_keras="2.20.0"), CPU_NODE, "", "tf_keras", checks.PROBLEM, "tf_keras==2.21"),
    (GOOD, CPU_NODE, "", "gpus", checks.OK, "a CPU node"),
    (GOOD, checks.GpuFacts("/bin/nvidia-smi", 8), "", "gpus", checks.PROBLEM, "tensorflow[and-cuda]"),
    (dataclasses.replace(GOOD, cuda=True, tf_gpus=2), checks.GpuFacts("/bin/nvidia-smi", 8, visible=2), "", "gpus",
     checks.OK, "CUDA_VISIBLE_DEVICES leaves 2, TensorFlow sees 2"),
    (dataclasses.replace(GOOD, tf_gpus=1), CPU_NODE, "", "gpus", checks.PROBLEM, "nvidia-smi is not on PATH and NVML lists none"),
    (GOOD, checks.GpuFacts("/bin/nvidia-smi", failed="nvidia-smi exited with 9: NVIDIA-SMI has failed"), "", "gpus",
     checks.PROBLEM, "NVIDIA driver"),
    (GOOD, CPU_NODE, "", "horovod", checks.SKIPPED, "tfdist build-horovod"),
    (GOOD, CPU_NODE, "horovod", "horovod", checks.PROBLEM, "fix: tfdist build-horovod"),
    (dataclasses.replace(GOOD, horovod="0.28.1"), CPU_NODE, "", "horovod", checks.PROBLEM, "without Gloo"),
    (dataclasses.replace(GOOD, horovod_error="NotFoundError: undefined symbol: _ZN10tensorflow"), CPU_NODE, "",
     "horovod", checks.PROBLEM, "does not load with TensorFlow 2.21.0"),
    (dataclasses.replace(GOOD, horovod="0.28.1", gloo=True, horovod_build="0.28.1+tfdist.2"), CPU_NODE, "horovod",
     "horovod", checks.OK, "built with Gloo"),
    (dataclasses.replace(GOOD, tfdist=""), CPU_NODE, "", "python", checks.PROBLEM, "cannot import tfdist"),
])
def test_each_check_says_ok_or_the_problem_with_its_fix(py, gpus, mode, name, expected, words):
    result = status(run(py, gpus, mode=mode), name)
    assert result.status == expected and words in result.line(), result.line()
    assert ("; fix: " in result.line()) == (expected == checks.PROBLEM), result.line()


def test_a_probe_that_did_not_answer_is_the_one_problem_and_the_checks_needing_it_are_skipped():
    results = run(py=checks.PythonFacts("/p", failed="/p did not answer within 9 s while importing tensorflow"))
    assert [r.status for r in results if r.name in ("tensorflow", "keras", "tf_keras", "gpus", "horovod")] == \
        [checks.SKIPPED] * 5
    assert checks.verdict(results) == ("tfdist doctor: 1 problem; fix it before a long run", 1)
    assert checks.verdict(run()) == ("tfdist doctor: no problems found", 0)


def test_ports_are_counted_against_the_nodes_slots():
    few = checks.PortFacts(20000, 20009, "--port-range", free=5, taken=(20001, 20002))
    assert status(run(ports=few, cpus=2), "ports").status == checks.OK  # 2 slots: 4 ports
    line = status(run(ports=few, gpus=checks.GpuFacts("/bin/nvidia-smi", 8)), "ports").line()
    assert "8 slots need 16 (taken: 20001, 20002)" in line and "TFDIST_PORT_RANGE" in line


@pytest.fixture(scope="module")
def coordinator():
    authority = Authority.create()
    server = AgentsServer(":memory:", "127.0.0.1:0", authority).start()
    yield server.address, authority
    server.stop(grace=0)


def saved(tmp_path, credential, name):
    return credential.save(str(tmp_path / name))


@pytest.mark.parametrize("kind", ["user", "node"])
def test_a_credential_the_coordinator_accepts_is_ok_whatever_its_kind(tmp_path, coordinator, kind):
    address, authority = coordinator
    path = saved(tmp_path, authority.issue(kind, "n1", coordinator=address), "mine.json")
    result = checks.check_coordinator(doctor.probe_coordinator(None, path, 5.0))
    assert result.status == checks.OK and f"accepted the {kind} credential n1 ({path})" in result.detail, result


def test_a_credential_from_another_cluster_a_closed_port_and_a_silent_one_are_named(tmp_path, coordinator):
    address, authority = coordinator
    forged = dataclasses.replace(authority, secret=os.urandom(32)).issue("user", "alice", coordinator=address)
    refused = checks.check_coordinator(doctor.probe_coordinator(None, saved(tmp_path, forged, "f.json"), 5.0))
    assert refused.status == checks.PROBLEM and "wrong credential" in refused.detail and "another cluster" in refused.fix

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        gone = authority.issue("user", "alice", coordinator=f"127.0.0.1:{port}")
        unreachable = checks.check_coordinator(doctor.probe_coordinator(None, saved(tmp_path, gone, "g.json"), 5.0))
    assert unreachable.status == checks.PROBLEM and "cannot reach the coordinator at 127.0.0.1" in unreachable.detail

    with socket.socket() as silent:  # accepts the connection, never answers the TLS handshake
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = authority.issue("user", "alice", coordinator="127.0.0.1:%d" % silent.getsockname()[1])
        facts = doctor.probe_coordinator(None, saved(tmp_path, mute, "m.json"), 1.0)
    assert facts.outcome == "timeout" and facts.seconds < 10, facts
    assert "did not answer in time" in checks.check_coordinator(facts).detail

    missing = checks.check_coordinator(doctor.probe_coordinator(address, str(tmp_path / "nope.json"), 5.0))
    assert missing.status == checks.PROBLEM and "nope.json" in missing.detail


def test_gpus_come_from_nvidia_smi_as_the_agent_reads_them():
    env = {"PATH": os.path.join(REPO, "tests", "fakes") + os.pathsep + os.environ["PATH"], "TFDIST_FAKE_GPUS": "4"}
    assert doctor.probe_gpus(env) == checks.GpuFacts(os.path.join(REPO, "tests", "fakes", "nvidia-smi"), 4)
    fakes = doctor.probe_gpus({**env, "CUDA_VISIBLE_DEVICES": "1,GPU-00000003-fake-4000-8000-000000000003,7"})
    assert (fakes.listed, fakes.visible) == (4, 2)


def test_without_nvidia_smi_the_doctor_counts_nvmls_gpus_as_the_agent_does(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml([("GPU-aaaa", "NVIDIA H200"), ("GPU-bbbb", "NVIDIA H200")]))
    env = {"PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "GPU-bbbb"}  # a container with the driver's library only
    facts = doctor.probe_gpus(env)
    assert facts == checks.GpuFacts(checks.NVML, 2, visible=1)
    said = checks.check_gpus(dataclasses.replace(GOOD, cuda=True, tf_gpus=1), facts)
    assert (said.status, said.detail) == (checks.OK, "NVML lists 2, CUDA_VISIBLE_DEVICES leaves 1, TensorFlow sees 1")
    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml([], fails_to_start=True))
    assert doctor.probe_gpus(env) == checks.GpuFacts("")


def test_a_python_that_hangs_importing_tensorflow_is_stopped_and_named(tmp_path, monkeypatch, marker):
    hanging = tmp_path / "tensorflow"
    hanging.mkdir()
    (hanging / "__init__.py").write_text("import threading\nthreading.Event().wait()\n")  # never returns
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv(MARKER_VAR, marker)
    facts = doctor.probe_python(os.path.realpath(sys.executable), timeout=5.0)
    assert facts.failed.endswith("did not answer within 5 s while importing tensorflow"), facts

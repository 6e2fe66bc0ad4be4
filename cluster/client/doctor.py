"""`tfdist doctor`: checks this node as a user would before a long run, and says what to fix. It gathers
facts with bounded probes (the workers' Python in a subprocess, since importing TensorFlow takes
seconds; nvidia-smi; a bind of every port of the range; one real RPC to the coordinator with the given
credential; the private directories), then doctor_checks.py's pure checks turn them into lines."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Mapping

from cluster.client import doctor_checks as checks
from cluster.client import doctor_probe, local_runs
from cluster.shared.auth import find_credential
from cluster.shared.gpus import nvml_gpus, parse_gpu_query, visible_only
from cluster.shared.model import Gpu
from cluster.shared.user_dirs import machine_dir_path, runtime_dir
from cluster.shared.credentials import CredentialError
from cluster.shared.rpc import Client, ClientError
from tfdist.errors import UnsafePathError
from tfdist.private_files import check_private_dir

SMI_TIMEOUT = 20.0  # seconds, as the agent gives it
COORDINATOR_PORT_RANGE = (29500, 29999)  # `tfdist coordinator --port-range`'s default


def probe_python(python: str, timeout: float) -> checks.PythonFacts:
    """The workers' Python's facts; a probe that does not answer in `timeout` is stopped and named by
    the step it was in."""
    with open(doctor_probe.__file__, encoding="utf-8") as f:
        source = f.read()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    out = tempfile.TemporaryFile(mode="w+")  # not a pipe: a probe that fills one would hang on it
    with out:
        try:
            process = subprocess.Popen([python, "-c", source], stdout=out, stderr=subprocess.STDOUT, env=env,
                                       text=True)
        except OSError as e:
            return checks.PythonFacts(python, failed=f"cannot run {python}: {e.strerror}")
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        out.seek(0)
        lines = out.read().splitlines()
    steps = [line[len(doctor_probe.STEP):] for line in lines if line.startswith(doctor_probe.STEP)]
    doing = f" while {steps[-1]}" if steps else ""
    if code is None:
        return checks.PythonFacts(python, failed=f"{python} did not answer within {timeout:.0f} s{doing}")
    found = [line[len(doctor_probe.FACTS):] for line in lines if line.startswith(doctor_probe.FACTS)]
    if code != 0 or not found:
        said = next((line for line in reversed(lines) if line.strip() and not line.startswith(doctor_probe.STEP)), "")
        return checks.PythonFacts(python, failed=f"{python} exited with {code}{doing}: {said[:300]}")
    raw = json.loads(found[-1])
    fields = {f for f in checks.PythonFacts.__dataclass_fields__}
    return checks.PythonFacts(**{k: v for k, v in raw.items() if k in fields})


def probe_gpus(env: dict | None = None) -> checks.GpuFacts:
    """nvidia-smi's GPUs (NVML's where nvidia-smi is not installed), and how many of them CUDA_VISIBLE_DEVICES
    leaves (indices or UUIDs): as the agent reads them."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        listed = nvml_gpus()
        return _gpu_facts(checks.NVML, listed, env) if listed else checks.GpuFacts("")
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=SMI_TIMEOUT, env=dict(env))
    except subprocess.TimeoutExpired:
        return checks.GpuFacts(smi, failed=f"{smi} did not answer within {SMI_TIMEOUT:.0f} s")
    except OSError as e:
        return checks.GpuFacts(smi, failed=f"cannot run {smi}: {e.strerror}")
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        return checks.GpuFacts(smi, failed=f"{smi} exited with {out.returncode}: {said[-1] if said else ''}"[:300])
    return _gpu_facts(smi, parse_gpu_query(out.stdout), env)


def _gpu_facts(source: str, listed: list[Gpu], env: Mapping[str, str]) -> checks.GpuFacts:
    visible = None if env.get("CUDA_VISIBLE_DEVICES") is None else len(visible_only(listed, env))
    return checks.GpuFacts(source, len(listed), visible)


def probe_ports(port_range: tuple[int, int] | None, cluster: bool) -> checks.PortFacts:
    """How many ports of the range this node can bind now (as the agent binds them: every address)."""
    if port_range:
        (low, high), source = port_range, "--port-range"
    elif cluster:
        (low, high), source = COORDINATOR_PORT_RANGE, "a coordinator's default --port-range"
    else:
        from cluster.agent.daemon import lease_range  # TFDIST_PORT_RANGE, else below the ephemeral range
        from tfdist.errors import UserError

        try:
            low, high = lease_range()
        except UserError as e:
            return checks.PortFacts(0, 0, "TFDIST_PORT_RANGE", failed=str(e))
        source = "TFDIST_PORT_RANGE" if os.environ.get("TFDIST_PORT_RANGE") else "local launches: below the ephemeral range"
    free, taken = 0, []
    for port in range(low, high + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
                free += 1
            except OSError:
                if len(taken) < 5:
                    taken.append(port)
    return checks.PortFacts(low, high, source, free, tuple(taken))


def probe_coordinator(address: str | None, credentials: str | None, timeout: float) -> checks.CoordinatorFacts:
    """One real, cheap RPC (ListAgents) with the credential a user's commands would use. A node credential
    may not list agents: its PERMISSION_DENIED still says the coordinator accepted it."""
    if not address and not credentials:
        return checks.CoordinatorFacts()
    try:
        target, credential = find_credential(address, credentials)
    except (CredentialError, OSError) as e:
        return checks.CoordinatorFacts(address or "", "credential", message=str(e))
    described = f"{credential.kind} credential {credential.name}" + (f" ({credentials})" if credentials else "")
    start = time.monotonic()
    client = Client(target, credential, timeout=timeout)
    try:
        agents = client.call(client.coordinator.ListAgents, _list_agents_request())
        outcome, message, count = "ok", "", len(agents.agents)
    except ClientError as e:
        outcome, message, count = _outcome(e), str(e), 0
    finally:
        client.close()
    return checks.CoordinatorFacts(target, outcome, described, message, count, time.monotonic() - start)


def _list_agents_request():
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    return pb.ListAgentsRequest()


def _outcome(e: ClientError) -> str:
    code = e.code.name if e.code is not None else ""
    if code == "PERMISSION_DENIED":
        return "denied"
    if code == "UNAUTHENTICATED":
        return "tls" if "did not prove" in str(e) else "refused"
    return {"UNAVAILABLE": "unreachable", "DEADLINE_EXCEEDED": "timeout"}.get(code, "error")


def probe_dirs() -> list[checks.DirFacts]:
    """The directories a launch or an agent keeps private things in, where they exist."""
    found = []
    leases = machine_dir_path("ports")  # cluster/agent/ports.py's lease_dir, not created here
    runs = local_runs.runs_dir()  # local launches' jobs, in the user's state dir
    for what, path in (("runtime dir", runtime_dir()), ("port leases", leases),
                       ("state dir", os.path.dirname(runs)), ("local runs", runs)):
        exists = os.path.lexists(path)
        problem = ""
        if exists:
            try:
                check_private_dir(path)
            except UnsafePathError as e:
                problem = str(e)
        found.append(checks.DirFacts(what, path, exists, problem))
    return found


def run_doctor(args: argparse.Namespace) -> int:
    python = args.python or sys.executable
    if args.python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        from cluster.client.usage import UsageError

        raise UsageError(f"--python {args.python!r} is not an executable file: give the Python your workers run, "
                         "e.g. /opt/conda/envs/train/bin/python")
    print(f"tfdist doctor: checking this node for {python} (probes: {args.timeout:.0f} s each at most)", flush=True)
    gpus = probe_gpus()
    results = checks.all_checks(
        py=probe_python(python, args.timeout), gpus=gpus,
        ports=probe_ports(args.port_range, cluster=bool(args.coordinator or args.credentials)),
        coordinator=probe_coordinator(args.coordinator, args.credentials, min(args.timeout, 10.0)),
        dirs=probe_dirs(), mode=args.distribution or "", own_python=sys.executable, cpus=os.cpu_count() or 1)
    for result in results:
        print(result.line(), flush=True)
    closing, code = checks.verdict(results)
    print(closing)
    return code

"""`tfdist launch` inside a Slurm allocation (an sbatch script or an salloc shell).

Mechanics (docs/slurm.md says why): the launcher runs an embedded coordinator where it runs (the batch
host, or the login node of an salloc shell), on the address the nodes route to, serving TLS under a fresh
authority, and starts one `tfdist agent --slurm` per node of the allocation as ONE `srun` step (`--whole`:
the step holds each node's CPUs and GPUs, so the workers the agent starts may use them). The agents
register, and from there it is the same path as everywhere else: placement, per-node environment and
TF_CONFIG, `[rank=N]` logs, the exit summary, sibling teardown, startup timeout. Each node's credential
travels in the step's environment (readable by this user only), never on a command line. Slots come from the allocation: its tasks per node
(`SLURM_TASKS_PER_NODE`), or the GPUs Slurm gave each node (the agent finds them through
CUDA_VISIBLE_DEVICES in its step).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Mapping

from cluster.shared.auth import user_name
from cluster.shared.credentials import Credential
from tfdist.errors import UnavailableError, UserError

CREDENTIALS_ENV = "TFDIST_NODE_CREDENTIALS"  # node -> its credential (JSON), for the agents of the step
AGENTS_STEP = "tfdist-agents"  # the name of the srun step that runs one agent per node
SLOTS_ENV = "TFDIST_SLURM_SLOTS"  # "node1=2,node2=2": each agent's CPU slots
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class SlurmError(UserError):
    """The allocation and the request disagree, or Slurm's environment is not what it should be."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    tasks: tuple[int, ...]  # per node, in `nodes` order
    gpus: bool  # the allocation holds GPUs (GRES): slots are the GPUs each node got

    @property
    def slots(self) -> dict[str, int]:
        return dict(zip(self.nodes, self.tasks))


def in_allocation(env: Mapping[str, str]) -> bool:
    """Inside an sbatch script or an salloc shell, not inside a job step."""
    return bool(env.get("SLURM_JOB_ID")) and not env.get("SLURM_STEP_ID")


def parse_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed list: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        match = _TASKS.match(part.strip())
        if not match:
            raise SlurmError(f"SLURM_TASKS_PER_NODE={text!r} is not Slurm's format (e.g. '2(x3),1')")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def allocation_from_env(env: Mapping[str, str], hostnames=None) -> Allocation:
    """The allocation this process runs in. `hostnames(nodelist)` expands Slurm's node list (scontrol)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: run tfdist launch in the batch script "
                         "or the salloc shell of the allocation")
    nodes = tuple((hostnames or expand_nodelist)(nodelist))
    tasks = parse_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ",".join("1" for _ in nodes)))
    if len(tasks) != len(nodes):
        raise SlurmError(f"SLURM_TASKS_PER_NODE={env.get('SLURM_TASKS_PER_NODE')!r} names {len(tasks)} nodes but "
                         f"the allocation has {len(nodes)} ({nodelist})")
    gpus = bool(env.get("SLURM_JOB_GPUS") or env.get("SLURM_GPUS_ON_NODE") or env.get("SLURM_GPUS")
                or "gpu" in env.get("SLURM_JOB_GRES", "") or "gpu" in env.get("SLURM_TRES_PER_NODE", ""))
    return Allocation(env["SLURM_JOB_ID"], nodes, tuple(tasks), gpus)


def expand_nodelist(nodelist: str) -> list[str]:
    result = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise SlurmError(f"scontrol show hostnames {nodelist}: {result.stderr.strip() or 'failed'}")
    return result.stdout.split()


def check_slots(requested: int | None, allocation: Allocation) -> int:
    """The job's slots: the allocation's; a config or --slots that disagrees is one clear line."""
    have = sum(allocation.tasks)
    if allocation.gpus:
        return requested or 0  # GPU nodes: the agents report their GPUs; the coordinator checks the total
    if requested is not None and requested != have:
        per_node = ", ".join(f"{n}: {t}" for n, t in zip(allocation.nodes, allocation.tasks))
        raise SlurmError(f"slots_per_trial={requested}, but Slurm allocation {allocation.job_id} has {have} task(s) "
                         f"({per_node}); ask sbatch for --ntasks={requested} (or --ntasks-per-node), or leave "
                         "slots_per_trial out to use the allocation's")
    return have


def agent_identity(env: Mapping[str, str], name: str, slots: int | None,
                   credential: Credential | None) -> tuple[str, int | None, Credential]:
    """An agent of the launcher's srun step: its node name, CPU slots (None on GPU nodes: the GPUs Slurm
    gave the step are its slots) and its node credential from the embedded coordinator."""
    name = env.get("SLURMD_NODENAME") or name
    if slots is None and not env.get("CUDA_VISIBLE_DEVICES"):
        table = dict(part.split("=", 1) for part in env.get(SLOTS_ENV, "").split(",") if "=" in part)
        if name not in table:
            raise SlurmError(f"tfdist agent --slurm: node {name} is not in {SLOTS_ENV}={env.get(SLOTS_ENV, '')!r}")
        slots = int(table[name])
    if credential is None:
        credential = _node_credential(env, name)
    return name, slots, credential


def _node_credential(env: Mapping[str, str], name: str) -> Credential:
    """This node's credential out of the step's environment: the launcher issued one per node of the
    allocation (the environment of a user's processes is readable by that user only)."""
    try:
        issued = json.loads(env.get(CREDENTIALS_ENV, ""))
        return Credential.from_json(json.dumps(issued[name]), CREDENTIALS_ENV)
    except (ValueError, KeyError, TypeError):
        raise SlurmError(f"tfdist agent --slurm: no node credential for {name} in ${CREDENTIALS_ENV}; the agents of "
                         "an allocation are started by `tfdist launch` inside it") from None


def state_dir(config, allocation: Allocation) -> str | None:
    """Where the batch script's embedded coordinator keeps its state: beside the checkpoints, keyed by the
    Slurm job id, so that a requeued run of the same batch script finds its paused job and resumes it.
    None (a temporary directory) without checkpoint_storage."""
    if not config.checkpoint_storage:
        return None
    return os.path.join(os.path.abspath(config.checkpoint_storage), ".tfdist-slurm", allocation.job_id)


def requeue(allocation: Allocation) -> None:
    """A paused (preempted) job's batch script puts itself back in the queue: a job that stops on its own
    within a preemption's grace time is otherwise just done. Its next run finds the paused job in the
    state beside the checkpoints and resumes it."""
    result = subprocess.run(["scontrol", "requeue", allocation.job_id], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        sys.stderr.write(f"tfdist: could not requeue Slurm job {allocation.job_id} ({result.stderr.strip()}); "
                         "submit the batch script again to resume (with the same checkpoint_storage)\n")
    else:
        sys.stderr.write(f"tfdist: requeued Slurm job {allocation.job_id}: its next run resumes from the checkpoint\n")


def launcher_address(nodes: tuple[str, ...]) -> str:
    """The address the allocation's nodes reach this host at: the local end of the route to one of
    them (the batch host is the first node; an salloc shell runs on the login node), else this host
    name's address. Loopback never: the other nodes could not reach it."""
    for node in nodes:
        try:
            peer = socket.gethostbyname(node)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((peer, 9))  # no packet is sent: this only asks the kernel for the route
                local = probe.getsockname()[0]
        except OSError:
            continue
        if not local.startswith("127."):
            return local
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError as e:
        raise SlurmError(f"cannot resolve this host's name {name!r} ({e}) nor route to the allocation's nodes "
                         f"({', '.join(nodes)}); the nodes must reach the host tfdist launch runs on") from None
    if address.startswith("127."):
        raise SlurmError(f"no route to the allocation's nodes ({', '.join(nodes)}) and this host's name {name!r} "
                         f"resolves to {address}, which they cannot reach; fix /etc/hosts or DNS")
    return address


class SlurmCluster:
    """The embedded coordinator on the batch host and one agent per allocated node (one srun step)."""

    def __init__(self, allocation: Allocation, register_timeout: float = 120.0, state_dir: str | None = None):
        from cluster.agent.daemon import lease_range
        from cluster.coordinator.daemon import CoordinatorServer, Settings
        from cluster.engines import create_engine

        self.allocation = allocation
        self._tmp = None if state_dir else tempfile.mkdtemp(prefix="tfdist-slurm-")
        settings = Settings(heartbeat_interval=0.5, lost_after=30.0, port_range=lease_range())
        listen = f"{launcher_address(allocation.nodes)}:0"
        self.server = CoordinatorServer(state_dir or self._tmp, listen, settings=settings,
                                        engine=create_engine("agents")).start()
        self.credential = self.server.issue("admin", user_name())
        nodes = {n: json.loads(self.server.issue("node", n).to_json()) for n in allocation.nodes}
        env = {**os.environ, CREDENTIALS_ENV: json.dumps(nodes),
               SLOTS_ENV: ",".join(f"{n}={t}" for n, t in allocation.slots.items())}
        n = len(allocation.nodes)
        command = ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--whole", "--kill-on-bad-exit=1",
                   "--export=ALL", f"--job-name={AGENTS_STEP}", sys.executable, "-m", "cluster.client.cli", "agent",
                   "--slurm", "--coordinator", self.server.address]
        self.step = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_for_agents(register_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return self.server.address

    def _wait_for_agents(self, timeout: float) -> None:
        from cluster.coordinator.daemon import alive_agents

        deadline = time.monotonic() + timeout
        wanted = set(self.allocation.nodes)
        while True:
            alive = {a.name for a in alive_agents(self.server)}
            if wanted <= alive:
                return
            if self.step.poll() is not None:
                raise UnavailableError(f"the srun step of tfdist's agents ended (exit {self.step.returncode}) before "
                                       f"node(s) {', '.join(sorted(wanted - alive))} registered; see its output above")
            if time.monotonic() > deadline:
                raise UnavailableError(f"node(s) {', '.join(sorted(wanted - alive))} of Slurm allocation "
                                       f"{self.allocation.job_id} did not start tfdist's agent within {timeout:g}s")
            time.sleep(0.1)

    def paused_job(self) -> str | None:
        """The job a previous run of this batch script paused (preempted, then requeued by Slurm), if any."""
        from cluster.coordinator.daemon import latest_paused_job

        return latest_paused_job(self.server)

    def slots(self) -> int:
        """Every registered node's slots (on GPU nodes, the GPUs Slurm gave each)."""
        from cluster.coordinator.daemon import alive_agents

        return sum(a.slots for a in alive_agents(self.server))

    def close(self) -> None:
        """SIGTERM to the agents (each stops its workers and exits 0, and srun with them), then the
        coordinator. Through `scancel --signal=TERM JOB.STEP`: a SIGTERM to srun itself would force the
        step's termination, reported as every task "Killed"."""
        if self.step.poll() is None:
            step = self._step_id()
            if step is None or subprocess.run(["scancel", "--signal=TERM", step], capture_output=True,
                                              timeout=30).returncode != 0:
                self.step.send_signal(signal.SIGTERM)
            try:
                self.step.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.step.kill()
                self.step.wait(timeout=10)
        self.server.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _step_id(self) -> str | None:
        """The agents' step ("JOB.STEP"), found by its name among the job's steps."""
        try:
            result = subprocess.run(["squeue", "--steps", f"--jobs={self.allocation.job_id}", "--noheader",
                                     "--format=%i %j"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        steps = [line.split()[0] for line in result.stdout.splitlines() if line.split()[1:] == [AGENTS_STEP]]
        return steps[0] if result.returncode == 0 and len(steps) == 1 else None

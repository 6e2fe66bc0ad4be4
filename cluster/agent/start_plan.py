"""How this node starts one run of a job, decided before anything starts: every worker's final command
and environment, where the job's store is served and the secret it requires, or, when it cannot start,
the exits to report. The store is served where the workers are told to reach it (the host of
TFDIST_STORE: loopback for a one-node job, the node's address for the job otherwise); the run's secret
goes into each worker's environment only (TFDIST_STORE_SECRET, and where a plan left its placeholder).

Pure but for the command's resolution (which reads PATH and the working directory: pass `resolve`);
cluster/agent/job_run.py executes the plan. Every "each rank failed" report is built by
`every_rank_failed`, whichever step could not go on."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Mapping, Sequence

from cluster.agent.gang import WorkerLaunch
from cluster.shared.commands import CommandError, resolve_command
from tfdist.errors import CommandNotExecutableError
from cluster.shared.model import Address, WorkerExit
from cluster.shared.work import StartTask
from tfdist import envvars

BOOTSTRAP = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tfdist",
                         "compat", "bootstrap")
KERAS_PATCH = "TFDIST_KERAS_PATCH"  # "0": leave tfdist's worker start-up off PYTHONPATH
COMMAND_NOT_RUN = 127  # the shell's code for a command that could not be run
COMMAND_NOT_EXECUTABLE = 126  # the shell's code for one that exists but cannot be executed


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What a start plan needs to know of this node and this agent process."""

    agent: str
    addresses: tuple[Address, ...]
    environ: Mapping[str, str]  # the agent's own environment: every worker's starts from it
    bootstrap: str = ""  # tfdist's worker start-up directory ("": not installed)


def node_facts(agent: str, addresses: Sequence[Address]) -> NodeFacts:
    return NodeFacts(agent, tuple(addresses), dict(os.environ), BOOTSTRAP if os.path.isdir(BOOTSTRAP) else "")


@dataclasses.dataclass(frozen=True)
class StartPlan:
    job_id: str
    attempt: int
    agent: str
    job_dir: str  # the workers' ready, progress and metrics files; removed when the run ends
    workers: tuple[WorkerLaunch, ...]  # rank order; empty when the job cannot start here
    cwd: str | None
    failure_grace: float | None  # None: the gang's default
    store: tuple[str, int] | None  # (host, port) to serve the job's key-value store on
    metrics_files: tuple[str, ...]
    exits: tuple[WorkerExit, ...] = ()  # the run cannot start: report these instead
    store_secret: str = dataclasses.field(default="", repr=False)  # what the store requires ("": none was sent)

    @property
    def can_start(self) -> bool:
        return not self.exits

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(w.rank for w in self.workers)

    @property
    def store_shared(self) -> bool:
        """Whether workers of other nodes use the store this node serves: those may still be reading the job's
        last collective when this node's workers, done with it, have exited."""
        if self.store is None or not self.workers:
            return False
        try:
            size = int(self.workers[0].env.get(envvars.SIZE, len(self.workers)))
        except ValueError:
            return False
        return size > len(self.workers)


def every_rank_failed(ranks: Sequence[int], agent: str, attempt: int, lines: Sequence[str],
                      exit_code: int = COMMAND_NOT_RUN) -> tuple[WorkerExit, ...]:
    """The exits to report when a run could not start on this node: each of its ranks failed, with why."""
    return tuple(WorkerExit(rank=rank, agent=agent, exit_code=exit_code, last_lines=tuple(lines), attempt=attempt)
                 for rank in ranks)


def plan_start(task: StartTask, node: NodeFacts, job_dir: str,
               resolve: Callable[[list[str], str | None], list[str]] = resolve_command) -> StartPlan:
    """The run's plan on this node; `job_dir` holds its workers' ready, progress and metrics files."""
    cwd = task.working_dir or None
    ranks = tuple(p.rank for p in task.processes)
    try:
        command = tuple(resolve(list(task.command), cwd)) if task.processes else ()
    except CommandError as e:
        return StartPlan(task.job_id, task.attempt, node.agent, job_dir, (), cwd, None, None, (),
                         exits=every_rank_failed(ranks, node.agent, task.attempt, [f"{node.agent}: {e}"],
                                                 exit_code=COMMAND_NOT_EXECUTABLE
                                                 if isinstance(e, CommandNotExecutableError) else COMMAND_NOT_RUN))
    workers, metrics = [], []
    for p in task.processes:
        files = {name: os.path.join(job_dir, f"rank{p.rank}.{name}") for name in ("ready", "metrics", "progress")}
        env = worker_env(with_store_secret({**node.environ, **p.env, envvars.READY_FILE: files["ready"],
                                            envvars.METRICS_FILE: files["metrics"],
                                            envvars.PROGRESS_FILE: files["progress"]}, task.store_secret), node)
        workers.append(WorkerLaunch(rank=p.rank, command=command, env=env, ready_file=files["ready"], port=p.port,
                                    expendable=p.expendable))
        metrics.append(files["metrics"])
    store = (store_host(task), task.store_port) if task.store_port else None
    return StartPlan(task.job_id, task.attempt, node.agent, job_dir, tuple(workers), cwd, task.failure_grace or None,
                     store, tuple(metrics), store_secret=task.store_secret)


def store_host(task: StartTask) -> str:
    """Where this node serves the job's store: the host its workers are told (TFDIST_STORE), else the
    node's address for the job; loopback when neither is known."""
    env = task.processes[0].env if task.processes else {}
    planned = env.get(envvars.STORE, "").rpartition(":")[0]
    return planned or env.get(envvars.NODE_ADDRESS, "") or "127.0.0.1"


def with_store_secret(env: dict, secret: str) -> dict:
    """The run's store secret in TFDIST_STORE_SECRET and wherever the plan left its placeholder; none
    inherited from the agent's own environment. Without a secret the placeholders stay: the store then
    refuses the requests, and says why."""
    env.pop(envvars.STORE_SECRET, None)
    if not secret:
        return env
    env = {key: value.replace(envvars.STORE_SECRET_PLACEHOLDER, secret) for key, value in env.items()}
    env[envvars.STORE_SECRET] = secret
    return env


def worker_env(env: Mapping[str, str], node: NodeFacts) -> dict[str, str]:
    """The planned environment made final on this node: tfdist's start-up first on PYTHONPATH, and the
    values a launch plan cannot know filled in."""
    return fill_node_placeholders(with_bootstrap(dict(env), node.bootstrap), node.addresses)


def with_bootstrap(env: dict, bootstrap: str) -> dict:
    """Puts tfdist's worker start-up (tfdist/compat/bootstrap/sitecustomize.py) first on PYTHONPATH, so a
    script that never imports tfdist still gets the Keras 3 fix; TFDIST_KERAS_PATCH=0 leaves it out."""
    if env.get(KERAS_PATCH, "1") == "0" or not bootstrap:
        return env
    rest = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": bootstrap + (os.pathsep + rest if rest else "")}


def fill_node_placeholders(env: dict, addresses: Sequence[Address]) -> dict:
    """The name of the interface carrying the job's address here ("" if unknown: Gloo then picks by
    hostname) where the plan left its placeholder."""
    ip = env.get(envvars.NODE_ADDRESS, "")
    interface = next((a.interface for a in addresses if a.ip == ip and a.interface), "")
    return {key: interface if value == envvars.NODE_INTERFACE_PLACEHOLDER else value for key, value in env.items()}

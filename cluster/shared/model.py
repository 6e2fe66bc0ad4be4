"""Typed values of the control plane: jobs, allocations, agents, exits, and the lifecycles
(allowed transitions) of jobs and allocations. Immutable; changed with `dataclasses.replace`."""

from __future__ import annotations

import dataclasses
import enum
import signal

from cluster.shared.jobspec import JobSpec  # noqa: F401 (re-exported: the job's value)
from tfdist.errors import TfdistError


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"  # accepted, waiting for capacity
    STARTING = "STARTING"  # placed: ports leased and checked, peers probed, workers being started
    RUNNING = "RUNNING"  # every node started its workers
    PAUSED = "PAUSED"  # preempted: every worker saved at the same step and exited; `tfdist resume` continues
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED)

    @property
    def active(self) -> bool:
        """Placed and running (or starting) its workers: the states whose exits decide an outcome."""
        return self in (JobState.STARTING, JobState.RUNNING)

    @property
    def stopped(self) -> bool:
        """Nothing runs and nothing will unless someone acts: followers stop following."""
        return self.terminal or self is JobState.PAUSED


JOB_TRANSITIONS = {
    # -> PAUSED: `tfdist preempt` of a job not placed yet (it waits for `tfdist resume`).
    JobState.QUEUED: {JobState.STARTING, JobState.CANCELED, JobState.FAILED, JobState.PAUSED},
    # -> QUEUED: a restart after a failure (max_restarts); -> PAUSED: a synchronized preemption.
    JobState.STARTING: {JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED, JobState.QUEUED,
                        JobState.PAUSED},
    JobState.RUNNING: {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED, JobState.QUEUED, JobState.PAUSED},
    JobState.PAUSED: {JobState.QUEUED, JobState.CANCELED},  # `tfdist resume`, `tfdist cancel`
    JobState.SUCCEEDED: set(),
    JobState.FAILED: set(),
    JobState.CANCELED: set(),
}


class AllocState(str, enum.Enum):
    """What a job's hold on one node has got to. Each step is confirmed by the node's agent."""

    LEASING = "LEASING"  # the agent is asked to lease the ports (flock + bind) and listen on them
    LEASED = "LEASED"  # ports held and listening; multi-node jobs now probe each other
    REACHABLE = "REACHABLE"  # this node reached every peer's ports (or needs none): may start
    STARTED = "STARTED"  # the agent runs (or ran) the workers
    RELEASING = "RELEASING"  # the job ended; slots are held until the agent has stopped it


ALLOC_TRANSITIONS = {
    AllocState.LEASING: {AllocState.LEASED, AllocState.REACHABLE, AllocState.RELEASING},  # one node: no probe
    AllocState.LEASED: {AllocState.LEASING, AllocState.REACHABLE, AllocState.STARTED, AllocState.RELEASING},
    AllocState.REACHABLE: {AllocState.LEASING, AllocState.STARTED, AllocState.RELEASING},
    AllocState.STARTED: {AllocState.RELEASING},
    AllocState.RELEASING: set(),
}


class InvalidTransition(TfdistError):
    """A bug: something tried a transition the lifecycle does not allow."""


def check_job_transition(current: JobState, new: JobState) -> None:
    if new not in JOB_TRANSITIONS[current]:
        raise InvalidTransition(f"job cannot go from {current.value} to {new.value}")


def check_alloc_transition(current: AllocState, new: AllocState) -> None:
    if new != current and new not in ALLOC_TRANSITIONS[current]:
        raise InvalidTransition(f"allocation cannot go from {current.value} to {new.value}")


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int  # nvidia-smi's index: PCI bus order (tfdist sets CUDA_DEVICE_ORDER=PCI_BUS_ID to match)
    uuid: str
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Address:
    ip: str
    prefix_len: int
    interface: str = ""


@dataclasses.dataclass(frozen=True)
class AgentRecord:
    """What an agent told the coordinator about its node."""

    name: str
    slots: int
    addresses: tuple[Address, ...]
    gpus: tuple[Gpu, ...] = ()

    @property
    def gpu(self) -> bool:
        return bool(self.gpus)


@dataclasses.dataclass(frozen=True)
class Allocation:
    """The part of one node a job holds: slots, GPUs and ports, and how far it got."""

    job_id: str
    agent: str
    node_rank: int
    slots: int
    address: str  # where the job's other nodes reach this one
    ports: tuple[int, ...]  # one per worker process on the node
    gpus: tuple[int, ...] = ()  # GPU indices; empty on CPU-slot nodes
    state: AllocState = AllocState.LEASING


@dataclasses.dataclass(frozen=True)
class Job:
    id: str
    seq: int
    spec: JobSpec
    state: JobState
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    message: str = ""
    exit_code: int | None = None
    failed_rank: int | None = None  # the rank whose failure ended it
    placement: tuple[Allocation, ...] = ()  # as placed (kept after the job ended), node_rank order
    attempt: int = 0  # the current run: +1 per restart after a failure and per resume after a preemption
    restarts: int = 0  # restarts after failures so far (max_restarts bounds them; resumes do not count)
    preempt_requested: bool = False  # `tfdist preempt` (or SIGTERM to `tfdist launch`) asked this run to stop
    preempted_step: int | None = None  # the step this run's workers stopped and saved at
    preemptible: bool = False  # this run's chief checks for preemption (it reached its first step boundary)
    owner: str = ""  # who submitted it: the user credential's name ("" for jobs stored before owners)

    @property
    def terminal(self) -> bool:
        return self.state.terminal


class ExperimentState(str, enum.Enum):
    ACTIVE = "ACTIVE"  # its searcher makes and decides trials
    PAUSED = "PAUSED"  # `tfdist preempt` of the experiment: its trials paused, its searcher's decisions held
    COMPLETED = "COMPLETED"  # the search ended: every trial it made ended
    CANCELED = "CANCELED"
    FAILED = "FAILED"  # a trial could not be made (its values broke a rule of the config)

    @property
    def terminal(self) -> bool:
        return self in (ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.FAILED)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A hyperparameter search: its config (a searcher that searches, the space), its searcher's state (plain
    data, cluster/coordinator/experiments/search.py), and its held decisions while paused. Its trials are jobs
    whose spec names it."""
    id: str
    seq: int
    spec: JobSpec
    state: ExperimentState
    created_at: float
    owner: str = ""
    ended_at: float | None = None
    message: str = ""
    search: dict = dataclasses.field(default_factory=dict, compare=False)  # search.SearchState.to_plain()
    held: tuple = ()  # ops held while PAUSED, as plain data

    @property
    def terminal(self) -> bool:
        return self.state.terminal


@dataclasses.dataclass(frozen=True)
class LogLine:
    rank: int
    stream: str  # stdout or stderr
    text: str
    time: float
    seq: int = 0  # the coordinator numbers each job's lines as they arrive


@dataclasses.dataclass(frozen=True)
class MetricRow:
    rank: int
    step: int
    name: str
    value: float
    time: float
    note: str = ""  # tfdist's own records (tfdist.checkpoint: the checkpoint's path)


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    rank: int
    agent: str
    exit_code: int  # negative: killed by that signal
    last_lines: tuple[str, ...] = ()
    time: float = 0.0
    reason: str = ""  # set when tfdist itself gave up on the worker
    tolerated: bool = False  # it failed and the job went on without it (an expendable rank)
    attempt: int = 0  # the job's run it belongs to


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint the chief finished writing, as recorded with its job."""

    step: int
    path: str
    attempt: int
    time: float


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"

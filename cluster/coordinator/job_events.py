"""What a job's state machine (job_machine.py) hears and says, as values: the events that happen to a job
(from its users, its engine, its nodes and the clock) and the actions its step returns for the coordinator's
lifecycle to apply, in order."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Union

from cluster.coordinator import policy
from cluster.shared.model import Allocation, JobState
from cluster.shared.work import RunningJob


# ---------------------------------------------------------------- events: what happened to the job
@dataclasses.dataclass(frozen=True)
class Adopted:
    """The coordinator (re)started with the job placed: its clocks start now; exits recorded before decide."""


@dataclasses.dataclass(frozen=True)
class Placed:
    allocations: tuple[Allocation, ...]  # the engine made the scheduler's assignment concrete


@dataclasses.dataclass(frozen=True)
class PlacementFailed:
    message: str  # the assignment could not be made concrete (no address the nodes share, ...)


@dataclasses.dataclass(frozen=True)
class NodesStarted:
    """One of its nodes started its workers (its allocation is STARTED now)."""


@dataclasses.dataclass(frozen=True)
class Joined:
    ranks: frozenset[int]


@dataclasses.dataclass(frozen=True)
class Progress:
    report: RunningJob  # one node's report of its ranks' steps


@dataclasses.dataclass(frozen=True)
class Exited:
    """A worker's exit of the current run was recorded (it is among facts.exits())."""


@dataclasses.dataclass(frozen=True)
class Failed:
    outcome: policy.Outcome  # a node lost or gone, a peer unreachable, a port check failed


@dataclasses.dataclass(frozen=True)
class NotStarted:
    why: str  # an engine could not bring the placed gang up, through no fault of the job's (its pods were not
    # scheduled in time): placed again, without spending a restart


@dataclasses.dataclass(frozen=True)
class PortsBusy:
    node: str
    ports: frozenset[int]  # found busy there: not leased to the job on that node again


@dataclasses.dataclass(frozen=True)
class Freed:
    node: str  # the node let the job go (facts.allocations no longer has it)


@dataclasses.dataclass(frozen=True)
class Canceled:
    why: str = "canceled by the user"  # the job's message (an experiment's searcher stopping a trial says why)


@dataclasses.dataclass(frozen=True)
class PreemptRequested:
    pass


@dataclasses.dataclass(frozen=True)
class Resumed:
    pass


@dataclasses.dataclass(frozen=True)
class NodesReady:
    """Its engine's nodes for the run are up (a Kubernetes gang's pods Running, their images pulled): the
    start-up watchdog's clock starts now, not at the placement (a large image's pull is no start-up hang)."""


@dataclasses.dataclass(frozen=True)
class Disrupted:
    """Its engine takes a node of the run back, as a routine event (a drain, an eviction, a preemption by the
    cluster's scheduler): the run stops at a common step with a checkpoint where its workers check for
    preemption, and the job is placed again without spending a restart."""
    why: str


@dataclasses.dataclass(frozen=True)
class DeadlineCheck:
    """The periodic check: the start-up timeout and the step watchdog."""


@dataclasses.dataclass(frozen=True)
class NodesHeld:
    """Its engine's nodes for the run are not up yet for a reason outside the job (an admission queue holds its
    pods): the start-up watchdog's clock does not run meanwhile, and `why` is the job's waiting reason."""
    why: str


@dataclasses.dataclass(frozen=True)
class StacksAsked:
    node: str  # the node was told to dump its workers' stacks


Event = Union[Adopted, Placed, PlacementFailed, NodesStarted, Joined, Progress, Exited, Failed, NotStarted, PortsBusy,
              Freed, Canceled, PreemptRequested, Resumed, DeadlineCheck, StacksAsked, Disrupted, NodesReady, NodesHeld]


# ---------------------------------------------------------------- actions: what to do about it
@dataclasses.dataclass(frozen=True)
class SetState:
    state: JobState
    event: str  # the job's event line (after "STATE: ")
    fields: Mapping = dataclasses.field(default_factory=dict)  # the job's other stored fields that change


@dataclasses.dataclass(frozen=True)
class Note:
    event: str  # an event line without a state change
    fields: Mapping = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class LogLine:
    text: str  # a line of tfdist's own in the job's log


@dataclasses.dataclass(frozen=True)
class Hold:
    allocations: tuple[Allocation, ...]  # the nodes are the job's now: the engine starts its workers


@dataclasses.dataclass(frozen=True)
class Release:
    """Stop the job's workers; each node frees it once they are gone (`Freed`)."""


@dataclasses.dataclass(frozen=True)
class TellNodes:
    """Its nodes hear of a change at once (a preemption request)."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A scheduling round: nodes may be free, or a job queued."""


@dataclasses.dataclass(frozen=True)
class Count:
    what: str  # a telemetry counter: "stalls", "startup_timeouts"


@dataclasses.dataclass(frozen=True)
class Warn:
    text: str  # one line in the coordinator's log


Action = Union[SetState, Note, LogLine, Hold, Release, TellNodes, Schedule, Count, Warn]

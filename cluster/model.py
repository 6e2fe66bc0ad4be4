"""Job lifecycle: states and the transitions allowed between them."""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"  # accepted, waiting for capacity
    STARTING = "STARTING"  # placed: ports being checked, workers being started
    RUNNING = "RUNNING"  # every node started its workers
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED)


ALLOWED = {
    JobState.QUEUED: {JobState.STARTING, JobState.CANCELED, JobState.FAILED},
    JobState.STARTING: {JobState.RUNNING, JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED},
    JobState.RUNNING: {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED},
    JobState.SUCCEEDED: set(),
    JobState.FAILED: set(),
    JobState.CANCELED: set(),
}


class InvalidTransition(RuntimeError):
    pass


def check_transition(current: JobState, new: JobState) -> None:
    if new not in ALLOWED[current]:
        raise InvalidTransition(f"job cannot go from {current.value} to {new.value}")

"""A job spec in one line for tests that store or send jobs: the few fields a test names, the rest defaults."""

from __future__ import annotations

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.jobspec import JobSpec


def flat_spec(entrypoint=("x",), slots: int = 1, *, name: str = "", environment: dict | None = None,
              priority: int = 0, submission_id: str = "", working_dir: str = "", distribution_mode: str = "mwms",
              **config) -> JobSpec:
    """A decided spec (distribution mode `mwms` unless given), as a client would have submitted it."""
    return JobSpec(ExperimentConfig(name=name, entrypoint=tuple(entrypoint), slots_per_trial=slots,
                                    distribution_mode=distribution_mode, environment_variables=dict(environment or {}),
                                    slots_given=True, **config),
                   priority=priority, working_dir=working_dir, submission_id=submission_id)

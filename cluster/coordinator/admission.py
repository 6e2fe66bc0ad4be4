"""Whether a submitted job is admitted, and if not, what the user is told. Pure: the spec was
validated at the server's edge; this only asks whether the cluster could ever hold it. It runs under the
coordinator's lock, so its work is bounded by the cluster's distinct node sizes (scheduler.check_feasible_sizes),
never by how many nodes there are nor by a number in the request."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from cluster.coordinator import scheduler
from cluster.shared import modes
from cluster.shared.limits import MAX_SLOTS
from cluster.shared.model import Job, JobSpec


@dataclasses.dataclass(frozen=True)
class Admission:
    refusal: str = ""  # why the job is refused (what the submitter sees); "" when it is not
    known: Job | None = None  # a retried submit: the job its first try stored (nothing new is stored)

    @property
    def admitted(self) -> bool:
        return not self.refusal and self.known is None


def admit(spec: JobSpec, sizes: Mapping[int, int], known_submission: Job | None = None) -> Admission:
    """`sizes`: how many live nodes there are of each size (busy or not). `known_submission`: the job
    already stored under the spec's submission id, if any."""
    if known_submission is not None:
        return Admission(known=known_submission)
    if not 1 <= spec.slots <= MAX_SLOTS:  # the edge checked it (check_config); a spec made in-process too
        return Admission(refusal=f"slots_per_trial={spec.slots}: must be between 1 and {MAX_SLOTS:,}")
    try:
        scheduler.check_feasible_sizes(spec.slots, sizes)
    except scheduler.InfeasibleJob as e:
        return Admission(refusal=str(e))
    largest = max(size for size, count in sizes.items() if count > 0)  # some node lives: it was feasible
    if modes.planner(spec.distribution_mode).single_node and spec.slots > largest:
        return Admission(refusal=f"distribution mode {spec.distribution_mode} runs one process on one node, but "
                                 f"slots_per_trial={spec.slots} is more than the largest node ({largest} slots); "
                                 "use mode mwms to span nodes")
    return Admission()


class Admissions:
    """admit's answers for submissions without a known submission id. An answer depends only on the job's
    size and mode and on how many live nodes there are of each size, so it is worked out once per size and
    mode while those counts stay the same (a submission then costs a dictionary lookup, not a walk of the
    nodes: with 10,000 nodes that walk took 10-40 ms under load, whenever a node had joined or left)."""

    MOST = 1024  # answers kept

    def __init__(self):
        self._shape: tuple[tuple[int, int], ...] = ()
        self._answers: dict[tuple[int, str], str] = {}  # (slots, mode) -> refusal or ""

    def refusal(self, spec: JobSpec, sizes: Mapping[int, int]) -> str:
        """Why `spec` is refused ("" if admitted); `sizes`: how many live nodes of each size (NodeIndex.sizes)."""
        shape = tuple(sorted((size, count) for size, count in sizes.items() if count > 0))
        if shape != self._shape or len(self._answers) >= self.MOST:
            self._shape, self._answers = shape, {}
        key = (spec.slots, spec.distribution_mode)
        if key not in self._answers:
            self._answers[key] = admit(spec, sizes).refusal
        return self._answers[key]

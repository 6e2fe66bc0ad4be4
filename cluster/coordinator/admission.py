"""Whether a submitted job is admitted, and if not, what the user is told. Pure: the spec was
validated at the server's edge; this only asks whether the cluster could ever hold it. It runs under the
coordinator's lock, so its work is bounded by the cluster (scheduler.check_feasible), never by a number in
the request."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

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


def admit(spec: JobSpec, nodes: Sequence[scheduler.Node], known_submission: Job | None = None) -> Admission:
    """`nodes`: every live node with its full size (busy or not). `known_submission`: the job already
    stored under the spec's submission id, if any."""
    if known_submission is not None:
        return Admission(known=known_submission)
    if not 1 <= spec.slots <= MAX_SLOTS:  # the edge checked it (check_config); a spec made in-process too
        return Admission(refusal=f"slots_per_trial={spec.slots}: must be between 1 and {MAX_SLOTS:,}")
    try:
        scheduler.check_feasible(spec.slots, nodes)
    except scheduler.InfeasibleJob as e:
        return Admission(refusal=str(e))
    largest = max((n.slots for n in nodes), default=0)
    if modes.planner(spec.distribution_mode).single_node and spec.slots > largest:
        return Admission(refusal=f"distribution mode {spec.distribution_mode} runs one process on one node, but "
                                 f"slots_per_trial={spec.slots} is more than the largest node ({largest} slots); "
                                 "use mode mwms to span nodes")
    return Admission()


class Admissions:
    """admit's answers for submissions without a known submission id. An answer depends only on the job's
    size and mode and on the live nodes, so it is worked out once per size and mode while the nodes stay the
    same (`version`: bumped when one joins, comes back or is lost), not once per submission (its work is
    bounded by the cluster: 10,000 nodes cost a millisecond)."""

    MOST = 1024  # answers kept

    def __init__(self):
        self._answers: dict[tuple[int, int, str], str] = {}  # (version, slots, mode) -> refusal or ""

    def refusal(self, spec: JobSpec, version: int, nodes: Callable[..., Sequence[scheduler.Node]]) -> str:
        """Why `spec` is refused ("" if admitted); `nodes(include_busy=True)` gives every live node."""
        key = (version, spec.slots, spec.distribution_mode)
        if key not in self._answers:
            if len(self._answers) >= self.MOST or any(k[0] != version for k in self._answers):
                self._answers.clear()
            self._answers[key] = admit(spec, nodes(include_busy=True)).refusal
        return self._answers[key]

"""Pure decisions over typed values: how a job ended, what to do about a failure, whether its
start-up is overdue. The coordinator applies what these return; nothing here has side effects."""

from __future__ import annotations

import dataclasses
import enum
from typing import Collection, Iterable, Mapping, Sequence

from cluster.shared.model import Allocation, AllocState, JobState, LogLine, WorkerExit, describe_exit
from cluster.shared.modes.base import SuccessRule
from cluster.shared.work import ProbeFailure


@dataclasses.dataclass(frozen=True)
class Outcome:
    state: JobState
    message: str
    exit_code: int
    rank: int | None = None  # the rank whose failure (or absence) decided it, for its last lines
    restartable: bool = True  # False: running it again would fail the same way (no such command, no GPUs)


def job_outcome(rule: SuccessRule, size: int, exits: Sequence[WorkerExit],
                expendable: Collection[int] = ()) -> Outcome | None:
    """The job's outcome once its exits decide it, else None. The earliest failure is the root cause;
    exits that follow it (the others being stopped) do not change it. An expendable rank's failure
    (a parameter-server worker) decides nothing: the job goes on without it."""
    ordered = sorted(exits, key=lambda e: (e.time, e.rank))
    for e in ordered:
        if rule is SuccessRule.CHIEF and e.rank == 0 and e.exit_code == 0:
            break  # the chief's success decides; later exits are the others being stopped
        if e.exit_code != 0 and e.rank not in expendable:
            what = e.reason or describe_exit(e.exit_code)
            return Outcome(JobState.FAILED, f"rank {e.rank} on node {e.agent} {what}; the other workers were stopped",
                           worker_code(e.exit_code), e.rank)
    if rule is SuccessRule.CHIEF and any(e.rank == 0 for e in ordered):
        return Outcome(JobState.SUCCEEDED, "the chief (rank 0) exited with code 0", 0)
    failed = sorted({e.rank for e in ordered if e.exit_code != 0 and e.rank in expendable})
    if rule is SuccessRule.CHIEF and failed and set(expendable) <= {e.rank for e in ordered}:
        # Nobody is left to run the chief's steps: it would wait for them forever.
        return Outcome(JobState.FAILED, f"every worker task is gone (rank(s) {', '.join(map(str, failed))} failed); "
                                        "the chief and parameter servers were stopped", 1, failed[0])
    if rule is SuccessRule.ALL_RANKS and len({e.rank for e in ordered}) >= size:
        return Outcome(JobState.SUCCEEDED, "every worker exited with code 0", 0)
    return None


def worker_code(code: int) -> int:
    """A failed job's exit code from its root-cause worker's: its own (1-255), 128+N if signal N killed it (as a
    shell says; `tfdist launch` exits with it, docs/launch.md)."""
    return 128 - code if -128 < code < 0 else code if 0 < code < 256 else 1


COMMAND_NOT_FOUND = 127  # the agent's exit code for an entrypoint it cannot run (the shell's convention)
COMMAND_NOT_EXECUTABLE = 126  # ... and for one that exists but cannot be executed


class FailureAction(str, enum.Enum):
    FAIL = "FAIL"  # end the job now
    RESTART = "RESTART"  # stop every worker, then place and start the whole gang again (same or other nodes)


@dataclasses.dataclass(frozen=True)
class FailureDecision:
    action: FailureAction
    outcome: Outcome  # its message is what the job's events and followers are told

    @property
    def message(self) -> str:
        return self.outcome.message


def on_failure(outcome: Outcome, restarts: int, max_restarts: int) -> FailureDecision:
    """What to do when a job's process, node or start-up failed: restart the whole gang while restarts
    remain (training resumes from the latest checkpoint), unless running it again cannot help."""
    def said(suffix: str) -> Outcome:
        return dataclasses.replace(outcome, message=outcome.message + suffix)

    if not outcome.restartable or outcome.exit_code in (COMMAND_NOT_FOUND, COMMAND_NOT_EXECUTABLE):
        return FailureDecision(FailureAction.FAIL, said(
            " (not restarted: running it again would fail the same way)" if max_restarts else ""))
    if restarts < max_restarts:
        return FailureDecision(FailureAction.RESTART,
                               said(f"; restarting the job (restart {restarts + 1} of {max_restarts})"))
    if max_restarts:
        return FailureDecision(FailureAction.FAIL, said(f" (after {max_restarts} restart"
                                                        f"{'s' if max_restarts > 1 else ''}, max_restarts={max_restarts})"))
    return FailureDecision(FailureAction.FAIL, outcome)


def startup_overdue(size: int, allocations: Sequence[Allocation], joined: Iterable[int], started_clock: float,
                    now: float, timeout: float) -> Outcome | None:
    """A job not fully started within `timeout` of being placed fails, naming who is missing: the nodes
    that never started their workers, else the ranks that never joined (called tfdist.init() or listened
    on their port). A one-process job has nobody waiting on it: only its start is bounded."""
    if now - started_clock <= timeout:
        return None
    not_started = [a.agent for a in allocations if a.state != AllocState.STARTED]
    if not_started:
        return Outcome(JobState.FAILED, f"node(s) {', '.join(not_started)} did not start their workers within the "
                                        f"startup timeout of {timeout:g}s; the other workers were stopped", 1)
    if size <= 1:
        return None
    missing = sorted(set(range(size)) - set(joined))
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:20])) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
    return Outcome(JobState.FAILED, f"rank(s) {shown} did not join within the startup timeout "
                                    f"of {timeout:g}s (never called tfdist.init() nor listened on their port); the "
                                    "other workers were stopped. Raise --startup-timeout if start-up is just slow", 1,
                   missing[0])


REPORT_SLACK = 1.0  # seconds one rank's report may seem to trail another's (nodes' heartbeats arrive unevenly)


def stalled(progress: Mapping[int, tuple[int, float]], ranks: Sequence[int], now: float, timeout: float,
            node_of_rank: Mapping[int, str] | None = None) -> Outcome | None:
    """The step watchdog's decision. `progress`: rank -> (last step, when it was reported); `ranks`: the
    ranks watched (in training now). Once any rank has reported, every watched rank must report within
    `timeout` seconds of its last report (one that never reported counts from the job's first report).
    Of the ranks silent past it (or within REPORT_SLACK of it), the one behind the others is named: one
    that never reported, else the lowest step (in a synchronous job the others wait for it one step
    later), else the longest silent."""
    if not progress:
        return None
    first = min(t for _, t in progress.values())
    silent = {r: now - progress.get(r, (None, first))[1] for r in ranks}
    if not any(seconds > timeout for seconds in silent.values()):
        return None
    # The rank behind may seem to have reported a moment after the others (each node's report is dated by
    # its heartbeat's arrival, less the age it gives), so ranks nearly overdue are candidates too.
    candidates = [(*progress.get(r, (None, first)), r) for r, seconds in silent.items()
                  if seconds > timeout - REPORT_SLACK]
    step, since, rank = min(candidates, key=lambda o: (o[0] is not None, o[0] or 0, o[1], o[2]))
    where = f"after step {step}" if step is not None else "before its first step"
    node = (node_of_rank or {}).get(rank)
    on = f" on node {node}" if node else ""
    return Outcome(JobState.FAILED, f"rank {rank}{on} made no progress for {now - since:.0f}s ({where}; the step "
                                    f"watchdog allows {timeout:g}s); every rank's Python stacks are in the job's "
                                    "logs; the other workers were stopped", 1, rank)


def unreachable(agent: str, failures: Sequence[ProbeFailure]) -> Outcome:
    """A node could not connect to a peer's leased ports before start: fail fast, naming both ends."""
    first = failures[0]
    peer, address, port, error = first.peer, first.address, first.port, first.error
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return Outcome(JobState.FAILED, f"node {agent} cannot reach node {peer} at {address}:{port}: {error}{more}. "
                                    "Nothing was started. Check firewalls between the nodes, or start the "
                                    "coordinator with --subnet CIDR naming the network they share", 1)


def vanished(agent: str, ranks: Sequence[int], why: str) -> Outcome:
    return Outcome(JobState.FAILED, f"node {agent} {why}: rank(s) {', '.join(map(str, ranks))} are gone; "
                                    "the other workers were stopped", 1)


def lost(agent: str, silence: float) -> Outcome:
    return Outcome(JobState.FAILED, f"node {agent} was lost (no heartbeat for {silence:.0f}s); the other nodes' "
                                    "workers were stopped", 1)


def log_kept(lines: Sequence[LogLine], stored: int, cap: int) -> Sequence[LogLine]:
    """What of a batch of output a job's log keeps when it holds `stored` lines and may hold `cap` (0: no
    limit): all of it while under the limit (the batch that reaches it too), nothing once full."""
    return () if cap and stored >= cap else lines


def log_cut(job_id: str, stored: int, new: int, cap: int, when: float) -> LogLine | None:
    """The line saying where the log was cut, with the batch whose `new` lines (a retried batch's repeats
    not counted) reached the limit; None otherwise."""
    if not cap or stored >= cap or stored + new < cap:
        return None
    return LogLine(-1, "stderr", f"tfdist: job {job_id}: its log reached {cap:,} lines, the coordinator's limit "
                                 "(tfdist coordinator --max-log-lines); later output is not stored", when)

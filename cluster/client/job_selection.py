"""Which jobs `tfdist jobs` lists, as values: the --state names, and the selection a coordinator's listing
makes (job_commands asks the coordinator for it) and that a merge of the local runs makes the same way."""

from __future__ import annotations

from typing import Sequence

from cluster.client.usage import UsageError
from cluster.shared.model import JobState

ACTIVE = tuple(s.value for s in JobState if not s.terminal)  # QUEUED, STARTING, RUNNING, PAUSED
FINISHED = tuple(s.value for s in JobState if s.terminal)
SHOWN_FINISHED = 20  # `tfdist jobs` without a selection: every active job and the newest this many finished


def selected_states(given) -> tuple[str, ...]:
    """--state values (repeated or comma-separated, any case) as state names."""
    if not given:
        return ()
    names = [n.strip().upper() for g in ([given] if isinstance(given, str) else given) for n in g.split(",")]
    unknown = [n for n in names if n not in ACTIVE + FINISHED]
    if unknown:
        raise UsageError(f"tfdist jobs: unknown --state {unknown[0] or repr('')}; expected one of "
                         f"{', '.join(ACTIVE + FINISHED)}")
    return tuple(dict.fromkeys(names))


def checked_limit(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise UsageError(f"tfdist jobs: --limit must be at least 1, got {limit}")
    return limit


def number(job) -> int:
    """The job's number: what its id says before the dash."""
    head = job.id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def select(jobs: Sequence, states: Sequence[str], limit: int | None, every: bool) -> tuple[list, int]:
    """What `tfdist jobs` lists of `jobs`, oldest first, and how many of the selection it leaves out: with
    --all, --state or --limit, those (the newest `limit`); else every active job and the newest
    SHOWN_FINISHED finished ones."""
    ordered = sorted(jobs, key=number)
    if every or states or limit:
        chosen = [job for job in ordered if not states or job.state in states]
        shown = chosen[-limit:] if limit else chosen
        return shown, len(chosen) - len(shown)
    finished = [job for job in ordered if job.state in FINISHED]
    newest = {id(job) for job in finished[-SHOWN_FINISHED:]}
    shown = [job for job in ordered if job.state not in FINISHED or id(job) in newest]
    return shown, len(finished) - len(newest)

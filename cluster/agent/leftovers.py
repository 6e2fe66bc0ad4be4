"""What a killed agent's workers leave behind, and its cleanup by the next agent of that name.

Workers die with their agent (PR_SET_PDEATHSIG), but what they started may not. Each agent process
records its workers' process groups in a file of its own (several of one name can run on a machine at
once: every `tfdist launch`'s local engine records as "local"); an agent starting kills the groups
that dead agents' files name, and only processes that still carry that job's id.

The files live in this user's private directory for agents on this machine (cluster/shared/user_dirs.py),
under a directory no other user can write to; one that is not the user's own and private is refused in one
line naming it and its owner when the agent starts (GroupsFile), and never read: its files name processes
to kill."""

from __future__ import annotations

import json
import logging
import os
import signal
from typing import Mapping, Sequence

from cluster.shared.user_dirs import machine_dir
from tfdist import envvars
from tfdist.errors import UnsafePathError
from tfdist.private_files import check_private_dir, private_dir, read_private, write_private

log = logging.getLogger("tfdist.agent")
SUFFIX = ".groups.json"


def groups_dir() -> str:
    return machine_dir("agents")


def file_prefix(agent: str) -> str:
    return agent.replace("/", "_")


class GroupsFile:
    """This agent process's record of its workers' process groups: job id -> group ids. Its directory is
    made private (or refused: UnsafePathError) as it is created, so an agent refuses to start there."""

    def __init__(self, agent: str, directory: str | None = None, pid: int | None = None):
        self.directory = private_dir(directory or groups_dir())
        self.path = os.path.join(self.directory, f"{file_prefix(agent)}.{pid or os.getpid()}{SUFFIX}")

    def save(self, groups: Mapping[str, Sequence[int]]) -> None:
        """Replaces the record; none is kept while nothing runs (nothing a successor would clean up)."""
        if not groups:
            _unlink(self.path)
            return
        try:
            private_dir(self.directory)  # again: a temp cleaner may have removed it since
            write_private(self.path, json.dumps({job: list(pgids) for job, pgids in groups.items()}).encode())
        except (OSError, UnsafePathError) as e:  # the workers run on; only a successor's cleanup is lost
            log.warning("cannot record worker process groups in %s: %s", self.path, e)


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def dead_agents_groups(directory: str, agent: str) -> dict[int, str]:
    """Process group -> job id, from the files of dead runs of an agent of this name (each file read is
    removed). Files of agents still running are left alone. A directory that is not private is not
    read (UnsafePathError): another user could have written what it names."""
    prefix = file_prefix(agent)
    try:
        check_private_dir(directory)
    except UnsafePathError:
        if os.path.lexists(directory):
            raise
        return {}  # nothing recorded yet
    try:
        files = [f for f in os.listdir(directory) if f.startswith(f"{prefix}.") and f.endswith(SUFFIX)]
    except OSError:
        return {}
    wanted: dict[int, str] = {}
    for filename in files:
        owner = filename[len(prefix) + 1:-len(SUFFIX)]
        if not owner.isdigit() or process_alive(int(owner)):
            continue
        path = os.path.join(directory, filename)
        try:
            recorded = json.loads(read_private(path, 1 << 20))
            wanted.update({int(pgid): job for job, pgids in recorded.items() for pgid in pgids})
        except (OSError, UnsafePathError, ValueError, AttributeError, TypeError):
            pass
        _unlink(path)
    return wanted


def kill_leftovers(directory: str, agent: str) -> list[int]:
    """Kills the process groups that dead runs of an agent of this name recorded (their workers'
    children, which outlived them), checking each process still belongs to that job before touching
    it. Returns the pids killed."""
    wanted = dead_agents_groups(directory, agent)
    killed = []
    for entry in os.listdir("/proc") if wanted else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                pgid = int(f.read().rsplit(")", 1)[1].split()[2])
            if pgid not in wanted:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"{envvars.JOB_ID}={wanted[pgid]}".encode() not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    if killed:
        log.warning("killed %d leftover worker process(es) of a previous run of this agent: %s", len(killed), killed)
    return killed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

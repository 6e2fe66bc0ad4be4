"""Where a job's TensorBoard event files go: one function of the job, so the chief that writes them
(`MetricsReporter(tensorboard=True)`) and `tfdist tensorboard ID` that serves them agree without
asking each other.

    <checkpoint_storage>/<job id>/tensorboard      the job has checkpoint_storage (next to its checkpoints)
    <working dir>/tfdist-tensorboard/<job id>      otherwise: under the directory the job was launched from

Both are paths every node of a cluster with a shared filesystem sees the same; without one, the files
are on the chief's node. Imports nothing heavy: the CLI uses it too.
"""

from __future__ import annotations

import os
import time

from tfdist import envvars

SUBDIR = "tensorboard"  # inside the job's checkpoint directory
UNDER_WORKING_DIR = "tfdist-tensorboard"  # inside the job's working directory, one folder per job


def job_event_dir(job_id: str, checkpoint_storage: str = "", working_dir: str = "") -> str:
    """The job's event-file directory ("" when neither place is known: no checkpoint_storage and no
    working directory recorded)."""
    if checkpoint_storage:
        return os.path.join(checkpoint_storage.rstrip("/") or "/", job_id, SUBDIR)
    if working_dir:
        return os.path.join(working_dir, UNDER_WORKING_DIR, job_id)
    return ""


def this_jobs_event_dir() -> str:
    """The same place, seen from a worker: from the launcher's variables (a worker runs in the job's
    working directory). A script run without tfdist gets a folder of its own under the current
    directory, named by the time it started."""
    checkpoints = os.environ.get(envvars.CHECKPOINT_DIR)  # <checkpoint_storage>/<job id>
    if checkpoints:
        return os.path.join(os.path.abspath(checkpoints), SUBDIR)
    job_id = os.environ.get(envvars.JOB_ID) or time.strftime("local-%Y%m%d-%H%M%S")
    return job_event_dir(job_id, working_dir=os.getcwd())

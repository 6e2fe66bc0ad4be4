"""Checkpoints the coordinator knows about: written under the job's `checkpoint_storage`, recorded
with the job and its step, and read back when the job restarts (max_restarts) or resumes (after a
preemption).

    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    step = tfdist.restore_checkpoint(ckpt)       # 0 on a fresh start
    ...
    tfdist.save_checkpoint(ckpt, step)           # on every rank

`tfdist.callbacks.Checkpoint` does this for `model.fit`. Every rank calls `save_checkpoint`
(MultiWorkerMirroredStrategy needs every worker in a save); only the chief's copy is kept, the
others write to temporary paths that are removed at once (in modes whose chief saves alone, its mode's
`every_rank_saves`, they write nothing). The chief records the checkpoint only
after it is completely written, so a restart never reads half a checkpoint.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import tempfile
from typing import BinaryIO, Callable

from tfdist import envvars
from tfdist.context import CheckpointInfo
from tfdist.errors import TfdistError
from tfdist.metrics import CHECKPOINT_RECORD, report_record
from tfdist.modes import worker_mode
from tfdist.runtime import current_or_env

__all__ = ["CheckpointError", "CheckpointInfo", "checkpoint_dir", "latest", "restore_checkpoint", "save_checkpoint"]

PREFIX = "ckpt"
_NAME = re.compile(rf"^{PREFIX}-(\d+)\.index$")


class CheckpointError(TfdistError):
    """No place to write checkpoints, or a recorded one cannot be read."""


def checkpoint_dir(override: str | None = None) -> str:
    """Where this job's checkpoints go: `override`, else <checkpoint_storage>/<job id> from the launcher."""
    found = override or os.environ.get(envvars.CHECKPOINT_DIR)
    if not found:
        raise CheckpointError("no place for checkpoints: set checkpoint_storage.host_path in the experiment config "
                              "(a path every node shares), or pass directory=... when running without tfdist launch")
    return os.path.abspath(found)


def latest(ctx=None, override: str | None = None) -> CheckpointInfo | None:
    """The checkpoint this run resumes from: the coordinator's record when launched by tfdist (only
    completely written ones are recorded), else the newest in `override` (plain `python train.py`)."""
    ctx = ctx or current_or_env()
    recorded = ctx.cluster_info.latest_checkpoint if ctx.cluster_info else None
    if recorded is not None or os.environ.get(envvars.CLUSTER):
        return recorded
    if not override or not os.path.isdir(override):
        return None
    steps = [int(m.group(1)) for m in map(_NAME.match, os.listdir(override)) if m]
    return CheckpointInfo(os.path.join(os.path.abspath(override), f"{PREFIX}-{max(steps)}"), max(steps)) \
        if steps else None


def restore_checkpoint(checkpoint, ctx=None, directory: str | None = None) -> int:
    """Restores `checkpoint` (a tf.train.Checkpoint) from the latest recorded checkpoint and returns its
    step; 0 when there is none (a fresh start)."""
    ctx = ctx or current_or_env()
    found = latest(ctx, directory)
    if found is None:
        return 0
    if not os.path.exists(found.path + ".index"):
        node = ctx.cluster_info.node_of(ctx.rank).agent if ctx.cluster_info else "this node"
        raise CheckpointError(f"the checkpoint of step {found.step} ({found.path}) is not readable on {node}: "
                              "checkpoint_storage.host_path must be a directory every node shares")
    checkpoint.read(found.path).expect_partial()
    attempt = ctx.attempt
    print(f"tfdist: resumed from checkpoint {found.path} at step {found.step}"
          + (f" (run {attempt + 1} of the job)" if attempt else ""), file=sys.stderr, flush=True)
    return found.step


def save_checkpoint(checkpoint, step: int, ctx=None, directory: str | None = None, max_to_keep: int = 3) -> str | None:
    """Writes `checkpoint` for `step` on every rank that holds state; the chief's copy is kept and
    recorded with the job. Returns the path on the chief, None elsewhere."""
    ctx = ctx or current_or_env()
    root = checkpoint_dir(directory)
    if not ctx.is_chief and not worker_mode(ctx.distribution).every_rank_saves:
        return None  # e.g. each Horovod rank holds a full copy; in ps mode only the chief runs this
    if ctx.is_chief:
        os.makedirs(root, exist_ok=True)
        path = checkpoint.write(os.path.join(root, f"{PREFIX}-{step}"))
        report_record(CHECKPOINT_RECORD, step, ctx.attempt, note=path)
        _prune(root, keep=max_to_keep)
        return path
    scratch = tempfile.mkdtemp(prefix=f"tfdist-rank{ctx.rank}-ckpt-")
    try:
        checkpoint.write(os.path.join(scratch, f"{PREFIX}-{step}"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


def write_sealed(prefix: str, data_suffix: str, write_data: Callable[[BinaryIO], None], index: dict) -> None:
    """The files of a checkpoint in tfdist's own formats (tfdist/keras_state.py, tfdist/torch_state.py): the
    data to PREFIX+data_suffix by rename, then PREFIX.index, renamed into place last. A checkpoint cut short has
    no index and is never taken as the latest (`latest` and `_prune` look for it, as for tf.train.Checkpoint's);
    one written again at its step (a preemption right after a periodic save) loses its old index first."""
    try:
        os.remove(prefix + ".index")
    except FileNotFoundError:
        pass
    with open(prefix + data_suffix + ".partial", "wb") as f:
        write_data(f)
    os.replace(prefix + data_suffix + ".partial", prefix + data_suffix)
    with open(prefix + ".index.partial", "w") as f:
        json.dump(index, f)
    os.replace(prefix + ".index.partial", prefix + ".index")


def _prune(root: str, keep: int) -> None:
    """Keeps the newest `keep` checkpoints (0: all)."""
    if keep <= 0:
        return
    steps = sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(root)) if m)
    for step in steps[:-keep]:
        for f in glob.glob(os.path.join(root, f"{PREFIX}-{step}.*")):
            try:
                os.remove(f)
            except OSError:
                pass

"""`core_context.checkpoint`: Determined's checkpoints (a directory of the script's files with a
metadata.json, named by a storage id) in the job's tfdist checkpoint directory (<checkpoint_storage>/<job id>,
a directory every node shares; a local launch's own without one). The chief records each with the job once it
is completely written, as tfdist's own checkpoints are, so a restart or resume continues from it
(`det.get_cluster_info().latest_checkpoint`). Storage is direct, as Determined's shared_fs: the paths yielded are
the checkpoint itself, nothing is uploaded or downloaded."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import pathlib
import re
import shutil
import uuid
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

from tfdist import checkpointing, envvars
from tfdist.metrics import CHECKPOINT_RECORD, report_record

METADATA = "metadata.json"
_STORAGE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # uuid4s, and ids a script names itself


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    def __init__(self, distributed, steps: Callable[[], int], storage: Optional[str] = None) -> None:
        self._dist = distributed
        self._steps = steps  # the latest steps_completed reported: a metadata without one gets it
        self._storage = storage  # det.core.init(checkpoint_storage=...): a directory instead of the job's
        self._latest = ""  # the job's latest recorded checkpoint, as far as this process knows: never deleted

    # ------------------------------------------------------------ writing
    def store_path(self, metadata: Optional[Dict[str, Any]] = None, *, shard: bool = False):
        """A context manager: (path, storage_id) of a new checkpoint to write files into; recorded with the job
        when the block ends. shard=False: the chief alone calls it; shard=True: every rank (a collective), each
        writing its own files into the same directory, their metadata merged."""
        return self._sharded(metadata) if shard else self._single(metadata)

    @contextlib.contextmanager
    def _single(self, metadata: Optional[Dict[str, Any]]) -> Iterator[Tuple[pathlib.Path, str]]:
        if self._dist.rank != 0:
            raise RuntimeError(f"cannot call CheckpointContext.store_path(shard=False) from a non-chief worker "
                               f"(rank={self._dist.rank}); only rank 0 stores, or pass shard=True on every rank")
        storage_id = str(uuid.uuid4())
        path = self._path(storage_id)
        path.mkdir(parents=True, mode=0o700)
        yield path, storage_id
        self._seal(path, storage_id, dict(metadata or {}))

    @contextlib.contextmanager
    def _sharded(self, metadata: Optional[Dict[str, Any]]) -> Iterator[Tuple[pathlib.Path, str]]:
        storage_id = self._dist.broadcast(str(uuid.uuid4()) if self._dist.rank == 0 else None)
        path = self._path(storage_id)
        if self._dist.rank == 0:
            path.mkdir(parents=True, mode=0o700)
        self._dist.allgather(None)  # the directory exists before any rank writes into it
        yield path, storage_id
        combined = merge_metadata(self._dist.allgather(dict(metadata or {})))  # every rank: the same verdict
        if self._dist.rank == 0:
            self._seal(path, storage_id, combined)
        self._dist.allgather(None)  # every rank returns once the checkpoint is recorded

    def upload(self, ckpt_dir: Optional[Union[str, os.PathLike]], metadata: Optional[Dict[str, Any]] = None, *,
               shard: bool = False, selector: Optional[Callable[[str], bool]] = None) -> str:
        """Copies `ckpt_dir` into a new checkpoint; returns its storage id."""
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            if ckpt_dir is not None and (self._dist.rank == 0 or shard):
                _copy(pathlib.Path(ckpt_dir), path, selector)
        return storage_id

    # ------------------------------------------------------------ reading
    @contextlib.contextmanager
    def restore_path(self, storage_id: str, download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
                     *, selector: Optional[Callable[[str], bool]] = None) -> Iterator[pathlib.Path]:
        yield self._find(storage_id)

    def download(self, storage_id: str, ckpt_dir: Union[str, os.PathLike],
                 download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload, *,
                 selector: Optional[Callable[[str], bool]] = None) -> None:
        _copy(self._find(storage_id), pathlib.Path(ckpt_dir), selector)

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        with open(self._find(storage_id) / METADATA, encoding="utf-8") as f:
            return json.load(f)

    def delete(self, storage_id: str) -> None:
        """Deletes a checkpoint of this job's storage; not the job's latest recorded one, which a restart or
        resume continues from (the coordinator keeps that record)."""
        from determined import _info

        info = _info.get_cluster_info()
        if storage_id in (self._latest, info.latest_checkpoint if info else None):
            raise ValueError(f"checkpoint {storage_id} is the job's latest: a restart or resume continues from it, so "
                             "it is kept (save a newer one first)")
        path = self._find(storage_id)
        if path.parent != self._root():
            raise ValueError(f"checkpoint {storage_id} is another job's ({path.parent.name}): delete only this job's")
        shutil.rmtree(path)

    # ------------------------------------------------------------ where
    def _root(self) -> pathlib.Path:
        if self._storage:
            return pathlib.Path(self._storage)
        try:
            return pathlib.Path(checkpointing.checkpoint_dir())
        except checkpointing.CheckpointError:
            raise checkpointing.CheckpointError(
                "core_context.checkpoint: this job has no checkpoint storage; set checkpoint_storage: {type: "
                "shared_fs, host_path: DIR} in the config (a directory every node shares)") from None

    def _path(self, storage_id: str) -> pathlib.Path:
        return self._root() / storage_id

    def _find(self, storage_id: str) -> pathlib.Path:
        """A storage id of this job, or of another job of yours under the same checkpoint storage (a warm start from
        another trial's checkpoint). Ids are names, never paths or patterns."""
        storage_id = str(storage_id)
        if not _STORAGE_ID.match(storage_id):
            raise FileNotFoundError(f"checkpoint {storage_id!r}: not a storage id (letters, digits, '.', '_', '-')")
        mine = self._path(storage_id)
        if mine.is_dir():
            return mine
        if self._storage is None and self._root().parent.is_dir():  # its siblings: other jobs' of the same storage
            for other in sorted(self._root().parent.iterdir()):
                found = other / storage_id
                if found.is_dir() and not found.is_symlink() and found.stat().st_uid == os.getuid():
                    return found
        raise FileNotFoundError(f"checkpoint {storage_id} is not in this job's checkpoint storage ({self._root()})")

    def _seal(self, path: pathlib.Path, storage_id: str, metadata: Dict[str, Any]) -> None:
        """metadata.json, then the record with the job: a checkpoint is never taken as the latest half-written."""
        steps = metadata.get("steps_completed")
        if isinstance(steps, bool) or not isinstance(steps, int):
            steps = self._steps()
            metadata["steps_completed"] = steps
        partial = path / (METADATA + ".partial")
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(metadata, f, default=str)
        os.replace(partial, path / METADATA)
        self._latest = storage_id
        report_record(CHECKPOINT_RECORD, steps, int(os.environ.get(envvars.ATTEMPT, "0") or 0), note=str(path))


def merge_metadata(parts: list) -> Dict[str, Any]:
    """The ranks' metadata of one sharded checkpoint as one, as Determined merges it: mappings merged key by key,
    an equal value kept once, different values under one key refused (naming the key and the ranks)."""
    merged: Dict[str, Any] = {}
    conflicts: Dict[str, list] = {}

    def merge(into: Dict[str, Any], part: Dict[str, Any], rank: int, where: str) -> None:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(into.get(key, {}), dict):
                merge(into.setdefault(key, {}), value, rank, f"{where}/{key}")
            elif key in into and into[key] != value:
                conflicts.setdefault(f"{where}/{key}", []).append(rank)
            else:
                into[key] = value

    for rank, part in enumerate(parts):
        merge(merged, part, rank, "")
    if conflicts:
        said = [f"{key} (ranks {', '.join(map(str, ranks))} differ from an earlier rank)"
                for key, ranks in conflicts.items()]
        raise RuntimeError("store_path(shard=True): the ranks' metadata disagree: " + "; ".join(said))
    return merged


def _copy(source: pathlib.Path, target: pathlib.Path, selector: Optional[Callable[[str], bool]]) -> None:
    for item in source.rglob("*"):
        relative = item.relative_to(source)
        if item.is_symlink() or (selector and not selector(str(relative))):
            continue
        if item.is_dir():
            (target / relative).mkdir(parents=True, exist_ok=True)
        elif item.is_file():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(item, target / relative)


class DummyCheckpointContext(CheckpointContext):
    pass

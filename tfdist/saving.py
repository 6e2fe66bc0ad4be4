"""Saving from every worker: MWMS needs all workers to take part in a save,
but only the chief's copy is kept."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from tfdist.runtime import current


@contextlib.contextmanager
def worker_save_path(filepath: str, ctx=None) -> Iterator[str]:
    """Yields where this worker should write `filepath`: the path itself on the
    chief, a temporary path elsewhere (removed on exit)."""
    ctx = ctx or current()
    if ctx.is_chief:
        parent = os.path.dirname(os.path.abspath(filepath))
        os.makedirs(parent, exist_ok=True)
        yield filepath
        return
    tmpdir = tempfile.mkdtemp(prefix=f"tfdist-rank{ctx.rank}-save-")
    try:
        yield os.path.join(tmpdir, os.path.basename(filepath.rstrip("/")) or "model")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def save_model(model, filepath: str, ctx=None, **kwargs) -> str | None:
    """`model.save(filepath)` on every worker; only the chief's file is kept.
    Returns `filepath` on the chief and None on the other workers."""
    with worker_save_path(filepath, ctx) as path:
        model.save(path, **kwargs)
        return path if path == filepath else None

"""Rank- or node-scoped downloads: each rank (or each node) fetches its data once.

    path = tfdist.download("https://example.com/data.npz", scope="node")

The result lands in `<root>/<name>/rank{rank}` (scope="rank") or
`<root>/<name>/node{node_rank}` (scope="node", fetched by the node's local
chief while the other local workers wait). A download is staged in a
private directory and renamed into place with a completion marker, so a
partial download is never taken for a complete one, and a complete one is
never fetched again. Safe for any number of processes at once (file locks).
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import tempfile
import time
import urllib.parse
from typing import Callable, Union

from tfdist import envvars
from tfdist.errors import DownloadError
from tfdist.private_files import open_private, read_private, write_private
from tfdist.runtime import current_or_env

Source = Union[str, Callable[[str], None]]
COMPLETE_MARKER = ".tfdist-complete"
SCOPES = ("rank", "node")
_CHUNK = 1 << 20


def default_root() -> str:
    return os.environ.get(envvars.DATA_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "tfdist", "data")


def scoped_dir(root: str, name: str, scope: str, rank: int, node_rank: int) -> str:
    """Pure: the directory a scope owns."""
    if scope not in SCOPES:
        raise DownloadError(f"scope={scope!r} is not valid; use 'rank' or 'node'")
    leaf = f"rank{rank}" if scope == "rank" else f"node{node_rank}"
    return os.path.join(root, name, leaf)


def download(source: Source, *, scope: str = "rank", name: str | None = None, root: str | None = None,
             ctx=None, wait_timeout: float = 3600.0) -> str:
    """Fetches `source` (a file://, http:// or https:// URL, or a function
    called with the directory to fill) into this rank's or node's directory,
    once. Returns the directory."""
    if ctx is None:
        ctx = current_or_env()
    if name is None:
        name = _default_name(source)
    target = scoped_dir(root or default_root(), name, scope, ctx.rank, ctx.node_rank)
    fetcher = source if callable(source) else (lambda d: fetch_url(source, d))
    i_fetch = scope == "rank" or ctx.local_rank == 0
    deadline = time.monotonic() + wait_timeout
    while True:
        with _locked(target):
            if _is_complete(target):
                return target
            if i_fetch:
                _fetch_into(target, fetcher, ctx.job_id)
                return target
            failure = _read_failure(target, ctx.job_id)
            if failure:
                raise DownloadError(f"node {ctx.node_rank}: the local chief failed to download {name}: {failure}")
        if time.monotonic() > deadline:
            raise DownloadError(f"rank {ctx.rank}: waited {wait_timeout:.0f}s for the local chief to download "
                                f"{name} into {target}; it did not finish")
        time.sleep(0.1)


def fetch_url(url: str, dest_dir: str, timeout: float = 60.0) -> str:
    """Downloads one URL into `dest_dir`; returns the file's path."""
    import urllib.request  # slow to import; only downloads need it

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("file", "http", "https"):
        raise DownloadError(f"cannot download {url!r}: scheme {parsed.scheme!r} is not supported "
                            "(use file://, http:// or https://)")
    filename = os.path.basename(parsed.path.rstrip("/")) or "download"
    path = os.path.join(dest_dir, filename)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(path, "wb") as out:
            expected = response.headers.get("Content-Length") if parsed.scheme != "file" else None
            written = 0
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                written += len(chunk)
    except OSError as e:  # URLError, HTTPError and socket errors are OSErrors
        raise DownloadError(f"cannot download {url}: {e}") from None
    if expected is not None and int(expected) != written:
        raise DownloadError(f"download of {url} was cut short: got {written} of {expected} bytes")
    return path


# ---------------------------------------------------------------- internals

def _default_name(source: Source) -> str:
    if callable(source):
        return getattr(source, "__name__", "data").strip("<>") or "data"
    base = os.path.basename(urllib.parse.urlparse(source).path.rstrip("/"))
    return base.split(".")[0] or "data"


class _locked:
    """An exclusive flock on `<target>.lock`, shared by every process of the machine."""

    def __init__(self, target: str):
        self.path = target + ".lock"

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = open_private(self.path, os.O_RDWR | os.O_CREAT)  # 0600, never through a symlink
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _is_complete(target: str) -> bool:
    return os.path.exists(os.path.join(target, COMPLETE_MARKER))


def _failure_path(target: str) -> str:
    return target + ".failed"


def _read_failure(target: str, job_id: str) -> str | None:
    try:
        failed_job, _, message = read_private(_failure_path(target), 1 << 16).decode("utf-8", "replace").partition("\n")
    except FileNotFoundError:
        return None
    return message if failed_job == job_id else None  # a failure of an older job is not ours


def _fetch_into(target: str, fetcher: Callable[[str], None], job_id: str) -> None:
    """Runs under the lock: stage, fetch, mark complete, rename into place."""
    for stale in glob.glob(glob.escape(target) + ".partial.*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a process killed mid-download
    if os.path.exists(_failure_path(target)):
        os.remove(_failure_path(target))
    staging = tempfile.mkdtemp(prefix=os.path.basename(target) + ".partial.", dir=os.path.dirname(target))
    try:
        fetcher(staging)
        with open(os.path.join(staging, COMPLETE_MARKER), "w") as f:
            f.write(job_id)
        if os.path.exists(target):
            shutil.rmtree(target)  # an incomplete directory from an older run
        os.rename(staging, target)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        write_private(_failure_path(target), f"{job_id}\n{type(e).__name__}: {e}"[:1 << 16].encode())
        if isinstance(e, DownloadError) or not isinstance(e, Exception):
            raise
        raise DownloadError(f"fetching into {target} failed: {type(e).__name__}: {e}") from e

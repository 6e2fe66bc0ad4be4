"""Directories and files only their user can touch, on machines shared with other users.

Every directory tfdist creates (temp, runtime, state, leases) goes through `private_dir`: created
fresh with mode 0700, or, when it already exists, checked to be a real directory (not a symlink),
owned by this user and closed to group and others. Files are opened with O_NOFOLLOW and created 0600,
so a symlink another user planted cannot redirect a write. A path that fails a check is one line
naming it and its owner (UnsafePathError), never repaired silently: someone else made it.
"""

from __future__ import annotations

import os
import pwd
import stat

from tfdist.errors import UnsafePathError

DIR_MODE = 0o700
FILE_MODE = 0o600


def _owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_private_dir(path: str) -> None:
    """Raises UnsafePathError unless `path` is a directory (not a symlink) owned by this user with no
    group or other permissions."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UnsafePathError(f"{path} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink (made by {_owner_name(st.st_uid)}); tfdist uses only a real "
                              "directory of its own there: remove it, or point TMPDIR elsewhere")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory (made by {_owner_name(st.st_uid)}); remove it, or point "
                              "TMPDIR elsewhere")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} belongs to {_owner_name(st.st_uid)}, not to you ({_owner_name(os.geteuid())}): "
                              "another user made it first; tfdist will not use it. Remove it (as its owner or "
                              "root), or point TMPDIR elsewhere")
    if st.st_mode & 0o077:
        raise UnsafePathError(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); "
                              f"`chmod 700 {path}` or remove it")


def private_dir(path: str) -> str:
    """`path` as a private directory: created 0700 (parents as needed, with the default mode) or, when
    it exists, checked (check_private_dir). Returns the path."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask; this is exact
    check_private_dir(path)
    return path


def open_private(path: str, flags: int = os.O_RDONLY) -> int:
    """os.open without following a symlink at `path`; a created file is 0600. Returns the descriptor."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as e:
        if e.errno == 40:  # ELOOP: `path` is a symlink
            raise UnsafePathError(f"{path} is a symlink; tfdist does not follow symlinks it did not make: "
                                  "remove it") from None
        raise


def write_private(path: str, data: bytes) -> None:
    """Replaces `path` with `data` atomically (a fresh 0600 temp file beside it, then rename): a
    reader sees the old or the new content, and a planted symlink is replaced, never written through."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_private(path: str, limit: int = 1 << 20) -> bytes:
    """Reads a file tfdist wrote itself: not through a symlink, at most `limit` bytes."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafePathError(f"{path} is larger than {limit} bytes; it is not a file tfdist wrote")
    return data

"""Directories and files only their user can touch, on machines shared with other users.

Every directory tfdist creates (temp, runtime, state, leases) goes through `private_dir`: created
fresh with mode 0700, or, when it already exists, checked to be a real directory (not a symlink),
owned by this user and closed to group and others. An existing directory is never repaired (not even
our own 0755 one): what others could see or change in it cannot be undone by a chmod. Its parent must
be one no other user can rename entries in (owned by this user or root, and sticky if everyone may
write to it, as /tmp is), so the checked directory stays the one used. Files are opened with O_NOFOLLOW
and created 0600, so a symlink another user planted cannot redirect a read or a write; a file tfdist
writes must be its user's own. A path that fails a check is one line naming it and its owner
(UnsafePathError).

Daemons run with umask 077 (`daemon_umask`); the workers they start get the user's own umask back
(`original_umask`), so files a training script writes are as the user expects.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import secrets
import stat

from tfdist.errors import UnsafePathError

DIR_MODE = 0o700
FILE_MODE = 0o600
DAEMON_UMASK = 0o077
USER_UMASK_ENV = "TFDIST_USER_UMASK"  # the user's umask, for a daemon's children that are daemons too


def _owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _check_dir_stat(path: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink (made by {_owner_name(st.st_uid)}); tfdist uses only a real "
                              "directory of its own there: remove it, or choose another directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory (made by {_owner_name(st.st_uid)}): tfdist needs a "
                              "directory there; remove it, or choose another directory")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} belongs to {_owner_name(st.st_uid)}, not to you ({_owner_name(os.geteuid())}): "
                              "another user made it first; tfdist will not use it. Remove it (as its owner or "
                              "root), or choose another directory")
    if st.st_mode & 0o077:
        raise UnsafePathError(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}, owner "
                              f"{_owner_name(st.st_uid)}); `chmod 700 {path}` or remove it")


def _check_parent(path: str) -> None:
    """The directory holding `path` must not let another user replace `path` after it was checked."""
    parent = os.path.dirname(os.path.abspath(path))
    st = os.stat(parent)  # a symlinked /tmp is fine: what counts is the directory it leads to
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafePathError(f"{parent} (where tfdist keeps {os.path.basename(path)}) belongs to "
                              f"{_owner_name(st.st_uid)}, who could replace what tfdist keeps there: choose a "
                              "directory of your own")
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise UnsafePathError(f"{parent} (where tfdist keeps {os.path.basename(path)}) is writable by every user "
                              f"without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): anyone could replace "
                              f"what tfdist keeps there; `chmod +t {parent}`, or use a directory of your own")


def check_private_dir(path: str) -> None:
    """Raises UnsafePathError unless `path` is a directory (not a symlink) owned by this user with no
    group or other permissions, in a parent no other user can rename it in."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UnsafePathError(f"{path} does not exist") from None
    _check_dir_stat(path, st)
    _check_parent(path)


def private_dir(path: str) -> str:
    """`path` as a private directory: created 0700 (missing parents too) or, when it exists, checked
    (check_private_dir); never loosened or repaired. Returns the path."""
    missing, parent = [], os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(missing):
        _mkdir_0700(directory)
    _check_parent(path)  # before creating anything in it
    _mkdir_0700(path)
    check_private_dir(path)
    return path


def _mkdir_0700(path: str) -> None:
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, DIR_MODE)  # mkdir's mode is masked by the umask; this is exact
    finally:
        os.close(fd)


def open_private(path: str, flags: int = os.O_RDONLY) -> int:
    """os.open without following a symlink at `path`, of a regular file only; a created file is 0600,
    and a file opened for writing must be this user's own with no other name (hard link). O_TRUNC is
    applied after the checks. Returns the descriptor."""
    try:
        fd = os.open(path, flags & ~os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, FILE_MODE)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(f"{path} is a symlink{_made_by(path)}; tfdist does not follow symlinks: "
                                  "remove it") from None
        if e.errno == errno.ENXIO:  # a FIFO or socket with no reader
            raise UnsafePathError(f"{path} is not a regular file{_made_by(path)}: remove it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file (made by {_owner_name(st.st_uid)}): remove it")
        if flags & (os.O_WRONLY | os.O_RDWR):
            if st.st_uid != os.geteuid():
                raise UnsafePathError(f"{path} belongs to {_owner_name(st.st_uid)}, not to you: tfdist writes only "
                                      "files of its own; remove it")
            if st.st_nlink > 1:
                raise UnsafePathError(f"{path} has {st.st_nlink} names (hard links); tfdist writes only files of its "
                                      "own: remove it")
            if flags & os.O_TRUNC:
                os.ftruncate(fd, 0)
        if not flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _made_by(path: str) -> str:
    try:
        return f" (made by {_owner_name(os.lstat(path).st_uid)})"
    except OSError:
        return ""


def write_private(path: str, data: bytes) -> None:
    """Replaces `path` with `data` atomically (a fresh 0600 file of an unguessable name beside it, then
    rename): a reader sees the old or the new content, and a planted symlink is replaced, never
    written through."""
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
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
    """Reads a file tfdist wrote itself: not through a symlink, a regular file, at most `limit` bytes."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafePathError(f"{path} is larger than {limit} bytes; it is not a file tfdist wrote")
    return data


MAX_LINKS = 8  # links one mounted file may be reached through (a kubelet's atomic writer makes two)


def read_mounted(path: str, limit: int = 1 << 20) -> bytes:
    """Reads a file that may be a key of a volume a kubelet laid out (a Secret's, a ConfigMap's, a projected
    one): its atomic writer makes `credential.json -> ..data/credential.json` and `..data -> ..2026_...`, links
    that stay inside the volume's directory. Those are followed; nothing else: a link's target must be a
    relative path below `path`'s directory (no `/` at its start, no `..` part), every link and file on the way
    must be root's (the kubelet's) or this user's, and the file a regular one of at most `limit` bytes. A path
    that is no link is read as read_private does."""
    directory, name = os.path.split(os.path.abspath(path))
    if not stat.S_ISLNK(os.lstat(path).st_mode):
        st = os.lstat(path)
        if st.st_uid not in (0, os.geteuid()):  # a credential of another user's is not one to act with
            raise UnsafePathError(f"{path} belongs to {_owner_name(st.st_uid)}, neither you nor root: tfdist will "
                                  "not read it; use a file of your own")
        return read_private(path, limit)
    base = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fds = [base]
    try:
        parts, links, at = [name], 0, base  # `parts`: what is left to walk, relative to `at`
        while parts:
            part = parts.pop(0)
            st = os.stat(part, dir_fd=at, follow_symlinks=False)
            if st.st_uid not in (0, os.geteuid()):
                raise UnsafePathError(f"{path}: {part} in {directory} belongs to {_owner_name(st.st_uid)}, neither "
                                      "you nor root (a kubelet): tfdist will not read through it; remove it")
            if stat.S_ISLNK(st.st_mode):
                links += 1
                target = os.readlink(part, dir_fd=at)
                pieces = [p for p in target.split("/") if p not in ("", ".")]
                if links > MAX_LINKS or target.startswith("/") or ".." in pieces or not pieces:
                    raise UnsafePathError(f"{path} is a symlink (made by {_owner_name(st.st_uid)}) that leads to "
                                          f"{target!r}, outside {directory}; tfdist follows only the links a "
                                          "kubelet's volume makes inside its own directory: remove it")
                parts[:0] = pieces
                continue
            if parts:  # a directory on the way (the atomic writer's ..TIMESTAMP)
                if not stat.S_ISDIR(st.st_mode):
                    raise UnsafePathError(f"{path}: {part} in {directory} is not a directory; remove the link")
                at = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
                fds.append(at)
                continue
            fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=at)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()):
                    raise UnsafePathError(f"{path} leads to a file that is not a regular file of yours or root's "
                                          f"(owner {_owner_name(st.st_uid)}): remove the link")
                data = f.read(limit + 1)
            if len(data) > limit:
                raise UnsafePathError(f"{path} is larger than {limit} bytes; it is not a file tfdist wrote")
            return data
        raise UnsafePathError(f"{path} leads nowhere inside {directory}: remove the link")
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"{path} is a link to a file that does not exist", path) from None
    finally:
        for fd in fds:
            os.close(fd)


# ---------------------------------------------------------------- umask

def _current_umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(DAEMON_UMASK)  # no /proc: read it by setting it (at import, before threads start)
    os.umask(mask)
    return mask


def _inherited_umask() -> int | None:
    raw = os.environ.get(USER_UMASK_ENV, "")
    try:
        mask = int(raw, 8)
    except ValueError:
        return None
    return mask if 0 <= mask <= 0o777 else None


_ORIGINAL_UMASK = _inherited_umask()
if _ORIGINAL_UMASK is None:
    _ORIGINAL_UMASK = _current_umask()


def original_umask() -> int:
    """The user's umask: this process's at start, or what a parent daemon recorded in TFDIST_USER_UMASK.
    Workers are started with it (gang.py), not with a daemon's 077."""
    return _ORIGINAL_UMASK


def daemon_umask() -> int:
    """Sets this daemon process's umask to 077 (whatever it creates is its user's alone) and records the
    user's umask for the daemons it starts (TFDIST_USER_UMASK); returns the user's umask."""
    os.environ.setdefault(USER_UMASK_ENV, f"{_ORIGINAL_UMASK:04o}")
    os.umask(DAEMON_UMASK)
    return _ORIGINAL_UMASK

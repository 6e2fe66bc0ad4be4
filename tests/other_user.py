"""Acting as another local user in tests: `nobody`, through setpriv (the suite runs as root, as CI does).

A clone lives where its user put it: under /root, a `mktemp -d` directory or a CI workspace, all mode 0700.
`nobody` cannot reach anything under such a parent, neither the checkout nor its .venv, and the tests must
not open them up for it (that would be the very hole they test for). So what `nobody` runs comes from
`OtherUserPython`: a copy, in a fresh directory of its own under /tmp, of the checkout's packages and of the
installed distributions they import (grpcio, protobuf, ...), run by the base interpreter the venv was made
from. Every test that acts as another user takes NOBODY (and, to run tfdist's code, OtherUserPython) from
here; tests/integration/test_suite_setup.py checks that this holds, with the clone and the venv hidden."""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib import metadata

NOBODY_UID = 65534


def as_uid(uid: int) -> list[str]:
    """setpriv's argv to run as `uid` (its own group, no others): nobody, or a pod's runAsUser (1000)."""
    return ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--"]


NOBODY = as_uid(NOBODY_UID)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("cluster", "tfdist")  # the checkout's own, copied whole (they import lazily)
# What tfdist's control plane needs at run time, with what those need in turn (requirement closure).
ROOT_DISTRIBUTIONS = ("grpcio", "protobuf", "pyyaml", "absl-py", "cryptography", "prometheus_client")


def as_nobody(*argv, **kwargs) -> subprocess.CompletedProcess:
    """Runs argv as nobody, from /, with a hard timeout (30 s unless given)."""
    kwargs.setdefault("timeout", 30)
    kwargs.setdefault("cwd", "/")
    return subprocess.run([*NOBODY, *argv], **kwargs)


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(roots) -> list[metadata.Distribution]:
    """The installed distributions `roots` need (their requirements without extras, transitively)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = _name(todo.pop())
        if name in seen:
            continue
        try:
            seen[name] = dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed
        todo += [r for r in dist.requires or () if "extra ==" not in r and "extra==" not in r]
    return list(seen.values())


@functools.lru_cache(maxsize=None)
def runnable_python() -> str:
    """An interpreter of this Python's version that nobody can run: the system's first (anyone may run what is
    under /usr), else the venv's base interpreter if nobody can reach it (a pyenv under /root is not)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}", os.path.realpath(sys.executable)]
    for candidate in dict.fromkeys(candidates):
        if not os.path.isfile(candidate):
            continue
        probe = as_nobody(candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])", capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"})
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    raise RuntimeError(f"no Python {version} that another user (nobody) can run: tried {', '.join(candidates)}; "
                       f"install Debian's python{version} (apt-get install python{version})")


class OtherUserPython:
    """A Python that another user can run tfdist's code with, owing nothing to the clone or its venv."""

    def __init__(self, root: str | None = None):
        self.root = root or tempfile.mkdtemp(prefix="tfdist-other-user-")
        os.chmod(self.root, 0o755)  # readable, not writable: nobody runs it, cannot change it
        self.site = os.path.join(self.root, "site")
        self.code = os.path.join(self.root, "code")
        for package in PACKAGES:
            shutil.copytree(os.path.join(REPO, package), os.path.join(self.code, package),
                            ignore=shutil.ignore_patterns("__pycache__"))
        for dist in _closure(ROOT_DISTRIBUTIONS):
            for file in dist.files or ():
                if file.parts[0] == ".." or file.parts[0].endswith((".dist-info", ".egg-info")):
                    continue  # scripts outside site-packages, metadata
                source = str(dist.locate_file(file))
                if not os.path.isfile(source) or "__pycache__" in file.parts:
                    continue
                target = os.path.join(self.site, *file.parts)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(source, target)
        for path, dirs, files in os.walk(self.root):
            for name in dirs:
                os.chmod(os.path.join(path, name), 0o755)
            for name in files:
                full = os.path.join(path, name)
                os.chmod(full, 0o755 if os.stat(full).st_mode & stat.S_IXUSR else 0o644)
        self.python = runnable_python()

    def env(self, **extra) -> dict:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([self.code, self.site]),
               "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent",
               "GRPC_VERBOSITY": "NONE", "LANG": "C.UTF-8"}
        env.update(extra)
        return env

    def argv(self, *args) -> list[str]:
        """nobody running this Python with `args`."""
        return [*NOBODY, self.python, *args]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

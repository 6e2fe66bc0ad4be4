"""`tfdist build-horovod`'s kept wheel (cluster/client/build_horovod.sh): installed from the user's own cache
folder, never from a link or another user's folder. The script runs for real; the Python it builds for is a
stand-in that answers its few questions and records what pip was asked to install (compiling Horovod is
make test's own step)."""

import os
import pathlib
import stat
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "cluster" / "client" / "build_horovod.sh"
KEY = "0.28.1+tfdist.2-tf2.21.0-cpython-311-linux-x86_64"
FAKE_PYTHON = """#!/bin/bash
# argv: -c CODE, or -m pip ...
case "$*" in
  *"print(sys.prefix)"*) echo "$FAKE_ROOT/env" ;;
  *TFDIST_BUILD*"read()"*) exit 1 ;;  # not built here yet
  *"tf.__version__"*) echo 2.21.0 ;;
  *"import tensorflow"*) exit 0 ;;
  *cache_tag*) echo cpython-311-linux-x86_64 ;;
  *"-m pip"*"download"*) exit 1 ;;  # no index: a build would stop here
  *"-m pip"*"--force-reinstall"*) echo "${@: -1}" >> "$FAKE_ROOT/installed" ;;
  *"-m pip"*) exit 0 ;;
  *) exit 0 ;;
esac
"""


@pytest.fixture
def fake_python(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o700)
    return python


def _run(python, cache, tmp_path):
    env = {**os.environ, "FAKE_ROOT": str(tmp_path), "TFDIST_HOROVOD_CACHE": str(cache)}
    return subprocess.run(["bash", str(SCRIPT), str(python)], env=env, capture_output=True, text=True, timeout=60)


def _kept(folder):
    folder.mkdir(parents=True, mode=0o700)
    wheel = folder / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")
    return wheel


def test_a_kept_wheel_of_ones_own_is_installed_without_building(fake_python, tmp_path):
    wheel = _kept(tmp_path / "cache" / KEY)
    done = _run(fake_python, tmp_path / "cache", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installing the 0.28.1+tfdist.2 wheel built before" in done.stdout
    assert (tmp_path / "installed").read_text().split() == [str(wheel)]


def test_a_linked_or_another_users_cache_folder_is_never_installed_from(fake_python, tmp_path):
    elsewhere = _kept(tmp_path / "planted")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / KEY).symlink_to(elsewhere.parent)
    linked = _run(fake_python, tmp_path / "cache", tmp_path)
    assert "is a link or not yours; building without the cache" in linked.stdout, linked.stdout
    assert not (tmp_path / "installed").exists()  # it went on to build (no index here: it stopped)

    theirs = _kept(tmp_path / "cache2" / KEY)
    os.chown(theirs.parent, 65534, 65534)  # nobody's folder
    os.chown(theirs, 65534, 65534)
    other = _run(fake_python, tmp_path / "cache2", tmp_path)
    assert "is a link or not yours; building without the cache" in other.stdout, other.stdout
    assert not (tmp_path / "installed").exists()


def test_a_built_wheel_is_kept_in_a_private_folder(tmp_path):
    """The folder the script keeps a wheel in is made under umask 077: 0700, the wheel 0600."""
    folder = tmp_path / "cache" / KEY
    source = tmp_path / "horovod-x.whl"
    source.write_bytes(b"wheel")
    keep = ('(umask 077 && mkdir -p "$kept" && cp "$wheel" "$kept/.partial" && '
            'mv "$kept/.partial" "$kept/$(basename "$wheel")")')
    assert keep in SCRIPT.read_text()  # the script's own line, run here
    subprocess.run(["bash", "-c", f'kept="{folder}"; wheel="{source}"; {keep}'], check=True, timeout=30)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "horovod-x.whl").stat().st_mode) == 0o600

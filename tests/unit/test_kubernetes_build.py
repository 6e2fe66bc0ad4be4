"""`make kubernetes`'s cache (tests/kubernetes/build_control_plane.sh): a build is made once per cache folder
of the user's own, whole or not at all, never taken from a link or another user's folder; the background
build `make test` starts is waited for, and its failure is reported with its log. The script runs for real;
`go` is a stand-in on PATH that makes empty programs where the real one would compile them (the real
build is `make kubernetes`, measured in docs/development.md)."""

import os
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "kubernetes" / "build_control_plane.sh"
PROGRAMS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "kwok",
            "coredns", "kueue"]
FAKE_GO = """#!/bin/bash
# go build ... -o DIR/ PKG...: one empty program per package; go install PKG@V: into $GOBIN.
echo "$*" >> "$FAKE_ROOT/go-calls"
[ -n "$FAKE_GO_FAILS" ] && { echo "compile error: $FAKE_GO_FAILS"; exit 1; }
case "$1" in
  build) shift; out=""; pkgs=()
         while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; -*) shift ;; *) pkgs+=("$1"); shift ;; esac; done
         for p in "${pkgs[@]}"; do n=${p##*/}; install -m 0755 /dev/null "$out/$n"; done ;;
  install) p=${@: -1}; p=${p%@*}; install -m 0755 /dev/null "$GOBIN/${p##*/}" ;;
esac
"""


@pytest.fixture
def env(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_ROOT": str(tmp_path),
            "TFDIST_KUBE_CACHE": str(tmp_path / "cache")}


def _run(env, *args, **extra):
    return subprocess.run(["bash", str(SCRIPT), *args], env={**env, **extra}, capture_output=True, text=True,
                          timeout=120)


def _calls(tmp_path):
    calls = tmp_path / "go-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_build_is_made_once_into_a_private_folder_and_then_found(env, tmp_path):
    where = pathlib.Path(_run(env, "--print-dir").stdout.strip())
    assert where.parent.parent == tmp_path / "cache" and where.parent.name.startswith("v1.37.2-kwokv0.8.0-")
    first = _run(env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert sorted(p.name for p in where.iterdir()) == sorted([*PROGRAMS, ".kueue-version"])
    assert all(oct(p.stat().st_mode & 0o777) == "0o700" for p in [where, where.parent, *where.glob("[!.]*")])
    assert oct((where / ".kueue-version").stat().st_mode & 0o777) == "0o600"
    assert len(_calls(tmp_path)) == 4  # the control plane's and kubelet's build, KWOK's, CoreDNS's, Kueue's installs
    again = _run(env)
    assert again.returncode == 0 and "already built" in again.stdout and len(_calls(tmp_path)) == 4


def test_a_build_made_before_kueue_gets_kueue_alone(env, tmp_path):
    """A cache built before Kueue was added is not built again whole (tens of minutes): Kueue is added to it."""
    first = _run(env)
    assert first.returncode == 0, first.stdout + first.stderr
    where = pathlib.Path(_run(env, "--print-dir").stdout.strip())
    (where / "kueue").unlink()
    (where / ".kueue-version").unlink()
    calls = len(_calls(tmp_path))
    added = _run(env)
    assert added.returncode == 0 and "Kueue built in" in added.stdout, added.stdout + added.stderr
    assert len(_calls(tmp_path)) == calls + 1 and "sigs.k8s.io/kueue/cmd/kueue@" in _calls(tmp_path)[-1]
    assert (where / "kueue").exists() and (where / ".kueue-version").read_text().strip().startswith("v")
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".building")]


def test_a_failed_build_leaves_no_folder_that_counts_as_built(env, tmp_path):
    failed = _run(env, FAKE_GO_FAILS="cannot find package")
    assert failed.returncode != 0 and "cannot find package" in failed.stdout
    where = pathlib.Path(_run(env, "--print-dir").stdout.strip())
    assert not where.exists() and not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".building")]


def test_a_linked_or_another_users_cache_is_refused(env, tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir()
    (tmp_path / "cache").symlink_to(planted)
    refused = _run(env)
    assert refused.returncode == 1 and "is a link or not yours" in refused.stdout and not _calls(tmp_path)
    (tmp_path / "cache").unlink()
    (tmp_path / "cache").mkdir(mode=0o700)
    where = pathlib.Path(_run(env, "--print-dir").stdout.strip())
    where.parent.symlink_to(planted)  # the build's own folder, planted as a link
    refused = _run(env)
    assert refused.returncode == 1 and "is a link or not yours" in refused.stdout and not _calls(tmp_path)


def test_the_background_build_is_waited_for_and_its_failure_told(env, tmp_path):
    started = _run(env, "--start", FAKE_GO_FAILS="undefined: etcdmain")
    assert started.returncode == 0 and "in the background" in started.stdout
    waited = _run(env, "--wait")
    assert waited.returncode == 1 and "build failed" in waited.stdout and "undefined: etcdmain" in waited.stdout
    assert _run(env, "--start").returncode == 0
    done = _run(env, "--wait")
    assert done.returncode == 0 and "already built" in done.stdout, done.stdout
    assert _run(env, "--start").stdout.strip().endswith("bin")  # built: nothing started ("already built in ...")


def test_a_background_build_that_cannot_even_start_is_told_not_waited_for(env, tmp_path):
    no_go = {**env, "PATH": "/usr/bin:/bin"}  # no Go on PATH: the build stops before compiling anything
    assert _run(no_go, "--start").returncode == 0
    waited = _run(no_go, "--wait")
    assert waited.returncode == 1 and "build failed" in waited.stdout and "needs Go" in waited.stdout, waited.stdout


def test_another_users_build_folder_is_never_run(env, tmp_path):
    """A complete build of nobody's, planted where ours would be: refused, nothing built or taken."""
    where = pathlib.Path(_run(env, "--print-dir").stdout.strip())
    where.mkdir(parents=True)
    for program in PROGRAMS:
        (where / program).write_text("#!/bin/sh\n")
        (where / program).chmod(0o755)
    os.chown(where.parent, 65534, 65534)  # nobody's folder
    refused = _run(env)
    assert refused.returncode == 1 and "is a link or not yours" in refused.stdout and not _calls(tmp_path)
    assert _run(env, "--wait").returncode == 1

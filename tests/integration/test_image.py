"""`tfdist kubernetes image --base lean` for real: mmdebstrap, uv, umoci and skopeo build the coordinator's image
into a cache of the test's own; the same inputs built again from nothing give the same manifest digest; a second
call with a warm cache builds nothing and says so; a file added with --add lands in a layer of its own above the
cached ones; and the image, unpacked by umoci and run by runc, runs tfdist as uid 1000 in /workspace.

About 60-90 s on 2 cores (two cold builds of about 25 s each: mmdebstrap is most of it; PyPI for the lean
image's ~20 MB of wheels, once per cache). Needs root (runc, mmdebstrap's root mode) and Debian's mmdebstrap,
umoci, skopeo and runc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

import tfdist
from cluster.client.image import base_scan
from tests.conftest import REPO, run_cli

TOOLS = ("mmdebstrap", "umoci", "skopeo", "runc")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def scratch():
    # What the build needs is there (make test installs it: debian-packages), or the test fails saying so.
    assert os.geteuid() == 0, "runc and mmdebstrap's root mode need root (the suite runs as root, as CI does)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, f"needs Debian's {', '.join(missing)}: `make debian-packages` installs them"
    path = tempfile.mkdtemp(prefix="tfdist-image-test-")
    for package in ("cluster", "tfdist"):  # a copy: an edit of the checkout mid-test would be a new input
        shutil.copytree(os.path.join(REPO, package), os.path.join(path, "src", package),
                        ignore=shutil.ignore_patterns("__pycache__"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def build(marker, cache, *extra):
    """tfdist from the module's copy of the checkout (scratch/src): the inputs stay the same while it runs."""
    scratch = os.path.dirname(cache)
    done = run_cli(["kubernetes", "image", "--base", "lean", "--cache-dir", cache, *extra], marker, timeout=400,
                   cwd=scratch, PYTHONPATH=os.path.join(scratch, "src"))
    assert done.returncode == 0, done.stderr[-3000:]
    ref, _, digest = done.stdout.strip().rpartition("@")
    assert digest.startswith("sha256:") and ref.startswith("oci-archive:"), done.stdout
    return digest, done.stderr


@pytest.fixture(scope="module")
def built(scratch):
    """The lean image built twice from nothing, into two caches (marker: a uuid of the module's own)."""
    marker = uuid.uuid4().hex
    first, log = build(marker, os.path.join(scratch, "cache-a"))
    second, _ = build(marker, os.path.join(scratch, "cache-b"))
    return {"marker": marker, "first": first, "second": second, "log": log, "cache": os.path.join(scratch, "cache-a")}


def test_the_same_inputs_give_the_same_image(built):
    assert built["first"] == built["second"]
    assert "base Debian bookworm (mmdebstrap): built" in built["log"]


def test_a_second_build_does_nothing_and_says_so(built, marker):
    cache = built["cache"]
    before = sorted(os.listdir(os.path.join(cache, "layout", "blobs", "sha256")))
    digest, log = build(marker, cache)
    assert digest == built["first"]
    assert "nothing to do" in log and "built in" not in log, log
    assert sorted(os.listdir(os.path.join(cache, "layout", "blobs", "sha256"))) == before
    assert (os.stat(cache).st_mode & 0o777) == 0o700


def test_added_files_go_above_the_cached_layers(built, marker, scratch):
    src = os.path.join(scratch, "train.py")
    with open(src, "w") as f:
        f.write("print('trained')\n")
    out = os.path.join(scratch, "added.tar")
    digest, log = build(marker, built["cache"], "--add", f"{src}:/workspace/app/train.py", "--output",
                        f"oci-archive:{out}", "--tag", "added")
    assert digest != built["first"]
    assert log.count(": cached (") == 3 and log.count(": built in") == 1, log  # base, packages, tfdist; yours
    assert "your files and the config: built" in log


def unpack_and_run(layout: str, tag: str, bundle: str, script: str) -> subprocess.CompletedProcess:
    """The image unpacked by umoci into an OCI runtime bundle (its config: the image's user, working directory
    and environment), run by runc with `script` as its command."""
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", bundle], check=True, capture_output=True,
                   timeout=120)
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    config["process"].update(terminal=False, args=["sh", "-c", script])
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    name = "tfdist-image-test-" + uuid.uuid4().hex[:8]
    try:
        return subprocess.run(["runc", "run", "--bundle", bundle, name], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, timeout=60)


def test_the_image_runs_tfdist_as_1000_in_workspace(built, scratch):
    layout = os.path.join(built["cache"], "layout")
    with open(os.path.join(layout, "index.json")) as f:
        tags = {m["digest"]: m["annotations"]["org.opencontainers.image.ref.name"] for m in json.load(f)["manifests"]}
    tag = tags[built["first"]]
    manifest, config = base_scan.manifest(layout, tag)
    assert config["config"]["User"] == "1000:1000" and config["config"]["WorkingDir"] == "/workspace"
    assert config["created"] == "2026-01-01T00:00:00Z" and len(manifest["layers"]) == 3
    done = unpack_and_run(layout, tag, os.path.join(scratch, "bundle"), (
        "id -u; pwd; echo $HOME; touch /workspace/w $HOME/h && echo writable; for c in python python3 tfdist; do command -v $c; done; "
        "python -c 'import tfdist, cluster.client.cli, grpc, lightkube; print(\"imports\", tfdist.__version__)'; "
        "tfdist coordinator --help | head -1; python -c 'import tensorflow' 2>/dev/null || echo no-tensorflow"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == ["1000", "/workspace", "/home/tfdist", "writable"], done.stdout
    assert "/usr/bin/python\n/usr/bin/python3\n/opt/tfdist/bin/tfdist\n" in done.stdout
    assert f"imports {tfdist.__version__}" in done.stdout and "usage: tfdist coordinator" in done.stdout
    assert "no-tensorflow" in done.stdout  # the lean image: a coordinator's, without TensorFlow

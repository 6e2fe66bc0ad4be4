"""`tfdist kubernetes image`'s pure parts: the flags as values, the cache keys, the config, the Python a base
offers, the layer tars (the same bytes twice), the pinned lists against pyproject.toml, and bad flags as one
line with exit 2. The real build (mmdebstrap, uv, umoci, skopeo, runc) is tests/integration/test_image.py."""

from __future__ import annotations

import io
import os
import re
import tarfile
import tomllib

import pytest

from cluster.client import cli
from cluster.client.image import base_scan, plan, refs, tarball
from cluster.client.usage import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text,flavour,ref,pinned", [
    ("default", "default", "", False),
    ("worker", "default", "", False),
    ("lean", "lean", "", False),
    (f"docker://nvcr.io/nvidia/tensorflow@{DIGEST}", "custom", f"docker://nvcr.io/nvidia/tensorflow@{DIGEST}", True),
    ("docker://tensorflow/tensorflow:2.21.0-gpu", "custom", "docker://tensorflow/tensorflow:2.21.0-gpu", False),
    (f"registry.example.com:5000/team/tf@{DIGEST}", "custom", f"docker://registry.example.com:5000/team/tf@{DIGEST}",
     True),
    ("oci:layout:tf", "custom", "oci:/home/u/layout:tf", False),
    ("oci-archive:tf.tar", "custom", "oci-archive:/home/u/tf.tar", False),
])
def test_base_references(text, flavour, ref, pinned):
    assert refs.parse_base(text, "/home/u") == refs.Base(flavour, ref, pinned)


@pytest.mark.parametrize("text,says", [
    ("tensorflow/tensorflow:2.21.0-gpu", "docker://"),  # a tag without a transport: not pinned, not guessed
    ("docker://tf@sha256:abc", "sha256:<64 hex digits>"),
    ("docker://Bad Name", "not an image name"),
    ("containers-storage://x", "transport 'containers-storage'"),
    ("oci:", "names no path"),
])
def test_bad_bases_name_the_value_and_the_fix(text, says):
    with pytest.raises(UsageError) as e:
        refs.parse_base(text, "/tmp")
    assert repr(text) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_outputs_and_tags():
    assert refs.parse_output(None, "worker", "/c/tfdist-worker.tar", "/w") == \
        refs.Output("oci-archive", "/c/tfdist-worker.tar", "worker")
    assert refs.parse_output("oci-archive:out/img.tar", "lean", "", "/w").ref == "oci-archive:/w/out/img.tar:lean"
    assert refs.parse_output("oci:/srv/layout:v2", "lean", "", "/w") == refs.Output("oci", "/srv/layout", "v2")
    for bad in ("docker://reg/x:1", "oci-archive:", "img.tar"):
        with pytest.raises(UsageError, match="oci-archive:FILE.tar"):
            refs.parse_output(bad, "lean", "", "/w")
    with pytest.raises(UsageError, match=r"--tag '-x' is not an image tag"):
        refs.check_tag("-x")


def test_adds(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    assert refs.parse_add("train.py:/workspace/train.py", str(tmp_path)) == \
        refs.Add(str(tmp_path / "train.py"), "/workspace/train.py")
    for text, says in (("train.py", "give SRC:DEST"), ("train.py:workspace/t.py", "must be an absolute path"),
                       ("train.py:/a/../b", "without '..'"), ("gone.py:/w/gone.py", "does not exist")):
        with pytest.raises(UsageError, match=re.escape(says)):
            refs.parse_add(text, str(tmp_path))


PY = plan.Python("/usr/bin/python3", "3.11", "/usr/lib/python3/dist-packages", True)


def test_keys_change_with_every_input_and_only_then():
    deps = plan.deps_key("base", PY, "a==1\n")
    assert deps == plan.deps_key("base", PY, "a==1\n") and len(deps) == 24
    assert len({deps, plan.deps_key("base2", PY, "a==1\n"), plan.deps_key("base", PY, "a==2\n"),
                plan.deps_key("base", plan.Python("/usr/bin/python3", "3.12", PY.site_dir, True), "a==1\n")}) == 4
    assert plan.base_key("custom", DIGEST) != plan.base_key("custom", "sha256:" + "cd" * 32)
    assert plan.base_key("default", "") == plan.base_key("lean", "")  # one Debian base serves both flavours
    t = plan.tfdist_key("deps", PY, "src", "", b"root:x:0:0\n", b"")
    assert t != plan.tfdist_key("deps", PY, "src2", "", b"root:x:0:0\n", b"")
    assert plan.image_key(t, "adds", ["A=1"]) != plan.image_key(t, "adds", ["A=2"])


def test_config_runs_as_1000_in_workspace_with_tfdist_last_on_path():
    env = plan.image_env(["PATH=/opt/conda/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "HOME=/root"])
    assert env == ["HOME=/home/tfdist", "LANG=C.UTF-8", "NVIDIA_VISIBLE_DEVICES=all",
                   "PATH=/opt/conda/bin:/usr/bin:/opt/tfdist/bin", "PYTHONUNBUFFERED=1"]
    assert "PATH=" + plan.DEFAULT_PATH + ":/opt/tfdist/bin" in plan.image_env([])
    argv = plan.umoci_config_argv("L:t", env, "why")
    assert argv[argv.index("--config.user") + 1] == "1000:1000"
    assert argv[argv.index("--config.workingdir") + 1] == "/workspace"
    assert argv[argv.index("--created") + 1] == "2026-01-01T00:00:00Z"  # never the wall clock


def test_user_1000_is_added_once():
    passwd, group = plan.with_user(b"root:x:0:0:root:/root:/bin/sh\n", b"root:x:0:")
    assert passwd.endswith(b"\ntfdist:x:1000:1000:tfdist:/home/tfdist:/bin/sh\n")
    assert group == b"root:x:0:\ntfdist:x:1000:\n"
    assert plan.with_user(b"ubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n", b"ubuntu:x:1000:\n") == (None, None)


def test_tool_command_lines():
    assert "--no-deps" in plan.uv_install_argv("uv", PY, "lock.txt", "/t")
    assert plan.uv_install_argv("uv", PY, "l", "/t")[-4:] == ["--target", "/t", "-r", "l"]
    mm = plan.mmdebstrap_argv("/w/rootfs.tar")
    assert mm[0] == "mmdebstrap" and "--skip=output/dev" in mm and mm[-3:] == ["bookworm", "/w/rootfs.tar", plan.MIRROR]
    assert plan.compile_argv("python3.11", "/w/site", plan.SITE)[-3:] == ["-d", plan.SITE, "/w/site"]


def files(entries: dict[str, str], env=("PATH=/usr/local/bin:/usr/bin",)) -> base_scan.BaseFiles:
    return base_scan.BaseFiles(list(env), entries, {})


@pytest.mark.parametrize("entries,expected", [
    ({"usr/bin/python3": "python3.11", "usr/bin/python3.11": "", "usr/bin/python": "python3",
      "usr/lib/python3/dist-packages": ""}, PY),  # Debian, Ubuntu (TensorFlow's images)
    ({"usr/local/bin/python3": "python3.12", "usr/local/bin/python3.12": "",
      "usr/local/lib/python3.12/site-packages": ""},
     plan.Python("/usr/local/bin/python3", "3.12", "/usr/local/lib/python3.12/site-packages", False)),  # python.org
    ({"usr/bin/python3": "/usr/local/bin/python3.10", "usr/lib/python3/dist-packages": ""},
     plan.Python("/usr/bin/python3", "3.10", "/usr/lib/python3/dist-packages", False)),
])
def test_the_python_a_base_offers(entries, expected):
    assert base_scan.choose_python(files(entries), "B") == expected


def test_a_venv_on_path_is_used_as_itself():
    found = base_scan.choose_python(files({"opt/venv/bin/python": "/usr/bin/python3.11",
                                           "opt/venv/lib/python3.11/site-packages": ""},
                                          ["PATH=/opt/venv/bin:/usr/bin"]), "B")
    assert found == plan.Python("/opt/venv/bin/python", "3.11", "/opt/venv/lib/python3.11/site-packages", True)


@pytest.mark.parametrize("entries,says", [
    ({}, "has no python3 on its PATH (/usr/local/bin:/usr/bin)"),
    ({"usr/bin/python3": "python3.9", "usr/lib/python3/dist-packages": ""}, "is Python 3.9; tfdist needs 3.10"),
    ({"usr/bin/python3": "python3.11"}, "has no site-packages or dist-packages"),
])
def test_a_base_without_a_usable_python_is_refused(entries, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        base_scan.choose_python(files(entries), "docker://x@sha256:1")


def test_layer_tars_are_the_same_bytes_and_sorted(tmp_path):
    tree = tmp_path / "tree"
    (tree / "b" / "__pycache__").mkdir(parents=True)
    (tree / "b" / "x.py").write_text("x = 1\n")
    (tree / "b" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"pyc")
    (tree / "a.sh").write_text("#!/bin/sh\n")
    os.chmod(tree / "a.sh", 0o700)  # a builder's umask 077: the image still reads it
    (tree / "link").symlink_to("b/x.py")
    entries = tarball.tree_entries(str(tree), "/opt/t", bytecode=False) + [
        tarball.Entry("/workspace", "dir", 0o755, 1000, 1000), tarball.Entry("/etc/passwd", "file", data=b"p\n")]
    tarball.write(str(tmp_path / "1.tar"), entries)
    os.utime(tree / "b" / "x.py", (1, 1))  # an mtime is no input
    tarball.write(str(tmp_path / "2.tar"), list(reversed(entries)))
    data = (tmp_path / "1.tar").read_bytes()
    assert data == (tmp_path / "2.tar").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar}
    assert list(members) == sorted(members)
    assert "opt/t/b/__pycache__" not in members and "opt" in members and "etc" in members
    assert (members["workspace"].uid, members["opt/t/a.sh"].mode, members["opt/t/b/x.py"].mode) == (1000, 0o755, 0o644)
    assert members["opt/t/link"].linkname == "b/x.py" and {m.mtime for m in members.values()} == {plan.EPOCH}


def _pins(name: str) -> dict[str, str]:
    with open(plan.lock_path(name)) as f:
        return {re.split(r"[=;]", line)[0].strip().lower().replace("_", "-"): line.strip()
                for line in f if line.strip() and not line.startswith("#")}


def test_the_pinned_lists_hold_what_tfdist_needs():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    needed = [re.split(r"[<>=!~ \[;]", r)[0].lower().replace("_", "-")
              for r in project["dependencies"] + project["optional-dependencies"]["kubernetes"]]
    for flavour in ("lean", "default", "custom"):
        pins = _pins(flavour)
        assert all("==" in line for line in pins.values()), flavour
        assert not [n for n in needed if n not in pins], flavour
    assert _pins("default")["tensorflow-cpu"] == "tensorflow-cpu==2.21.0"
    assert "tensorflow-cpu" not in _pins("lean") and "tensorflow-cpu" not in _pins("custom")
    assert _pins("default")["tf-keras"] == _pins("custom")["tf-keras"] == "tf_keras==2.21.0"
    assert "nvidia-ml-py" in _pins("default") and "nvidia-ml-py" in _pins("custom")
    assert _pins("default")["grpcio"] == "grpcio==1.85.1"  # the generated stubs' own


@pytest.mark.parametrize("argv,says", [
    (["kubernetes", "image", "--base", "ubuntu"], "--base 'ubuntu' is neither a flavour nor an image reference"),
    (["kubernetes", "image", "--add", "nothing-here.py:/w/x.py"], "does not exist"),
    (["kubernetes", "image", "--output", "docker://r/x:1"], "give oci-archive:FILE.tar"),
    (["kubernetes", "image", "--tag", "a b"], "--tag 'a b' is not an image tag"),
    (["kubernetes", "image", "--image", "r/x:1"], "--image belongs to `tfdist kubernetes manifests`"),
    (["kubernetes", "image", "--output", "oci:dir", "--load-into", "/run/c.sock"], "--load-into imports an OCI archive"),
    (["kubernetes", "manifests"], "--image is required"),
    (["kubernetes", "manifests", "--image", "r/x:1", "--base", "lean"], "only `tfdist kubernetes image` takes --base"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "cache").exists()  # refused before anything was made


def test_files_added_into_the_users_own_directories_stay_the_users():
    """A layer's directory entry replaces the one below: an --add under /workspace made it root's, and the jobs'
    user (1000) could not write in its working directory (`Permission denied` for the digits example's
    TensorBoard files, found on the real node)."""
    from cluster.client.image import plan, tarball

    entries = plan.owned_by_user([tarball.Entry("/workspace/workers", "dir", 0o755),
                                  tarball.Entry("/workspace/workers/a.py", "file"),
                                  tarball.Entry("/opt/data/b.csv", "file")])
    owners = {e.path: (e.uid, e.gid, e.kind) for e in tarball.with_parents(entries)}
    assert owners["/workspace"] == (1000, 1000, "dir") and owners["/workspace/workers/a.py"][:2] == (1000, 1000)
    assert owners["/workspace/workers"] == (1000, 1000, "dir")
    assert owners["/opt/data/b.csv"][:2] == (0, 0) and owners["/opt"][:2] == (0, 0)

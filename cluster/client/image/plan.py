"""The image as values (pure): its layers, the keys that name what is cached, its config, and the command
lines of the tools that make it. build.py runs them.

Layers, bottom up, each an OCI layout tag in the cache named by its key (a tag that exists is not built again):
  base-KEY    Debian bookworm from mmdebstrap (python3, python-is-python3, ca-certificates), or the user's image
  deps-KEY    /opt/tfdist/site-packages: the pinned Python packages (locks/*.txt, installed --no-deps by uv)
  tfdist-KEY  tfdist's own packages and dist-info, /opt/tfdist/bin/tfdist, the .pth that puts the packages on the
              base Python's path (after its own), user 1000 in /etc/passwd, /workspace and HOME owned by 1000,
              /opt/tfdist/examples (worker image)
  image-KEY   the user's --add files, and the config (User 1000:1000, WorkingDir /workspace, Env)
Every key hashes its layer's inputs and the key below, so the same inputs give the same tags and digests."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os

BUILDER_VERSION = "1"  # change when what a layer holds changes for the same inputs: every key changes with it
EPOCH = 1767225600  # 2026-01-01T00:00:00Z: every file's mtime and every `created` in the image
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PLATFORM = "x86_64-manylinux_2_28"  # uv's --python-platform: glibc 2.28+ (Debian 10+, Ubuntu 20.04+, RHEL 8+)
UID = GID = 1000  # Kubernetes runs the pods as 1000 (runAsNonRoot wants a numeric user in the image)
USER = "tfdist"
HOME = "/home/tfdist"
WORKDIR = "/workspace"
OPT = "/opt/tfdist"
SITE = f"{OPT}/site-packages"
BIN = f"{OPT}/bin"
EXAMPLES = f"{OPT}/examples"
PTH = "tfdist-image.pth"
DEBIAN_PACKAGES = ("python3", "python-is-python3", "ca-certificates", "libstdc++6")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locks")


@dataclasses.dataclass(frozen=True)
class Python:
    """The base's interpreter tfdist is installed for: `path` as its PATH finds it (not resolved: a venv's
    python is its venv), `version` "3.N", `site_dir` the directory of the base's own packages (where the
    .pth goes), `python_on_path` whether `python` (not only python3) is on the base's PATH."""

    path: str
    version: str
    site_dir: str
    python_on_path: bool


def lock_name(flavour: str) -> str:
    return {"default": "worker", "lean": "lean"}.get(flavour, "custom")


def lock_path(flavour: str) -> str:
    return os.path.join(LOCKS, lock_name(flavour) + ".txt")


def key(*parts: object) -> str:
    """A cache key: the sha256 of the parts as canonical JSON, 24 hex digits (96 bits)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:24]


def timestamp() -> str:
    return datetime.datetime.fromtimestamp(EPOCH, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_key(flavour: str, digest: str) -> str:
    if flavour == "custom":
        return key("base", BUILDER_VERSION, digest)
    return key("base", BUILDER_VERSION, SUITE, MIRROR, DEBIAN_PACKAGES, EPOCH)


def deps_key(below: str, python: Python, lock_text: str) -> str:
    return key("deps", BUILDER_VERSION, below, python.version, PLATFORM, lock_text)


def tfdist_key(below: str, python: Python, sources_digest: str, examples_digest: str, passwd: bytes,
               group: bytes) -> str:
    return key("tfdist", BUILDER_VERSION, below, dataclasses.asdict(python), sources_digest, examples_digest,
               hashlib.sha256(passwd).hexdigest(), hashlib.sha256(group).hexdigest())


def image_key(below: str, adds_digest: str, config: list[str]) -> str:
    return key("image", BUILDER_VERSION, below, adds_digest, config)


def mmdebstrap_argv(out_tar: str) -> list[str]:
    """Debian bookworm's essential set with python3: a tar that is the same for the same mirror state
    (SOURCE_DATE_EPOCH in the environment: build.py sets it). No device nodes (the runtime makes /dev);
    no docs, man pages or locales (--dpkgopt path-exclude)."""
    drop = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
    return ["mmdebstrap", "--quiet", "--variant=essential", "--include=" + ",".join(DEBIAN_PACKAGES),
            "--skip=output/dev", *[f"--dpkgopt=path-exclude={p}" for p in drop],
            "--dpkgopt=path-include=/usr/share/doc/*/copyright", SUITE, out_tar, MIRROR]


def uv_install_argv(uv: str, python: Python, lock: str, target: str) -> list[str]:
    """The pinned packages into `target` for the base's Python version and a manylinux platform, each at
    the lock's version and nothing else (--no-deps: the lock is the closure, and tf_keras must not pull
    `tensorflow`); copied, not hard-linked, out of uv's cache; no bytecode (build.py compiles it, reproducibly)."""
    return [uv, "pip", "install", "--quiet", "--no-deps", "--link-mode", "copy", "--no-compile",
            "--python-version", python.version, "--python-platform", PLATFORM, "--target", target, "-r", lock]


def compile_argv(interpreter: str, tree: str, dest: str) -> list[str]:
    """Bytecode for `tree` as the image will see it at `dest` (the file names in tracebacks), checked by
    source hash rather than mtime: the same bytes every build (with PYTHONHASHSEED=0: sets' order)."""
    return [interpreter, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash", "-d", dest, tree]


def image_env(base_env: list[str]) -> list[str]:
    """The base's environment with /opt/tfdist/bin last on PATH (the base's python stays first), unbuffered
    Python output (worker lines reach the logs at once) and HOME set for user 1000."""
    env = dict(item.split("=", 1) for item in base_env if "=" in item)
    path = env.get("PATH", DEFAULT_PATH)
    if BIN not in path.split(":"):
        path = f"{path}:{BIN}"
    env.update({"PATH": path, "PYTHONUNBUFFERED": "1", "HOME": HOME})
    env.setdefault("LANG", "C.UTF-8")
    return [f"{k}={v}" for k, v in sorted(env.items())]


def umoci_config_argv(image: str, env: list[str], history: str) -> list[str]:
    """The final config: numeric user 1000 (runAsNonRoot), /workspace, the environment, `tfdist --help` as
    the default command, the fixed creation time (umoci writes the wall clock unless told)."""
    created = timestamp()
    argv = ["umoci", "config", "--image", image, "--created", created, "--history.created", created,
            "--history.created_by", history, "--config.user", f"{UID}:{GID}", "--config.workingdir", WORKDIR,
            "--clear=config.env", "--clear=config.cmd", "--config.cmd", "tfdist", "--config.cmd", "--help",
            "--architecture", "amd64", "--os", "linux"]
    for item in env:
        argv += ["--config.env", item]
    return argv


def add_layer_argv(image: str, new_tag: str, tar: str, what: str) -> list[str]:
    return ["umoci", "raw", "add-layer", "--image", image, "--tag", new_tag, "--history.created", timestamp(),
            "--history.created_by", what, tar]


def with_user(passwd: bytes, group: bytes) -> tuple[bytes | None, bytes | None]:
    """/etc/passwd and /etc/group with user and group 1000 added where the base lacks them (None: unchanged).
    A base whose uid 1000 exists under another name keeps it (its HOME is still ours: image_env)."""
    def has(text: bytes, ident: int) -> bool:
        return any(len(f) > 2 and f[2] == str(ident) for f in (line.split(":") for line in text.decode().splitlines()))

    def added(text: bytes, line: str) -> bytes:
        return text + (b"" if not text or text.endswith(b"\n") else b"\n") + line.encode() + b"\n"

    new_passwd = None if has(passwd, UID) else added(passwd, f"{USER}:x:{UID}:{GID}:tfdist:{HOME}:/bin/sh")
    new_group = None if has(group, GID) else added(group, f"{USER}:x:{GID}:")
    return new_passwd, new_group


def launcher(python: Python) -> bytes:
    """/opt/tfdist/bin/tfdist: the console script pip would write, for the base's interpreter."""
    return (f"#!{python.path}\nimport sys\nfrom cluster.client.cli import entry_point\n"
            "sys.exit(entry_point())\n").encode()


def pth_line() -> bytes:
    """The .pth in the base's own site directory: /opt/tfdist/site-packages after the base's packages (which
    win: a TensorFlow image keeps its own), with .pth files of its own processed."""
    return f"import site; site.addsitedir({SITE!r})\n".encode()


def dist_info(version: str, requires: list[str]) -> dict[str, bytes]:
    """tfdist's dist-info (importlib.metadata finds its version and requirements), file name -> bytes."""
    metadata = "".join(["Metadata-Version: 2.1\nName: tfdist\n", f"Version: {version}\n",
                        *[f"Requires-Dist: {r}\n" for r in requires]])
    return {"METADATA": metadata.encode(), "INSTALLER": b"tfdist kubernetes image\n",
            "top_level.txt": b"cluster\ntfdist\n",
            "entry_points.txt": b"[console_scripts]\ntfdist = cluster.client.cli:entry_point\n"}


def owned_by_user(entries: list) -> list:
    """Your --add files as the image's user's where they land in its own directories (/workspace, HOME), with
    those directories themselves: a layer's directory entry replaces the one below, and a /workspace of
    root's would leave the jobs' user unable to write in its working directory."""
    import dataclasses

    own = (WORKDIR, HOME)
    mine = [dataclasses.replace(e, uid=UID, gid=GID) if any(e.path == d or e.path.startswith(d + "/") for d in own)
            else e for e in entries]
    for directory in own:
        if any(e.path.startswith(directory + "/") for e in mine) and not any(e.path == directory for e in mine):
            mine.append(dataclasses.replace(mine[0], path=directory, kind="dir", mode=0o755, uid=UID, gid=GID,
                                            data=b"", source="", target=""))
    return mine

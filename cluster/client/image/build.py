"""The executor of plan.py: runs mmdebstrap, uv, umoci and skopeo (argument lists, never a shell) over one OCI
layout in the cache, building only the layers whose key has no tag there yet, then copies the image out.

The cache (${XDG_CACHE_HOME:-~/.cache}/tfdist/images, 0700, checked as tfdist/private_files.py checks every
directory of tfdist's): layout/ (the OCI layout: every layer's tag, content-addressed blobs), uv/ (the wheels:
a rebuild needs no network), facts/ (what a base holds, so a GB base is read once), lock, work/ (removed)."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from typing import Callable

from cluster.client.image import base_scan, plan, tarball
from cluster.client.image.refs import Add, Base, Output
from tfdist.errors import TfdistError
from tfdist.private_files import open_private, private_dir

TOOL_TIMEOUT = 3600.0  # seconds any one tool may take (a TensorFlow base pulled over a slow link)
PACKAGES = ("cluster", "tfdist")


class ImageBuildError(TfdistError):
    """A tool the image build runs failed or is missing; the message names it, its last lines and the fix."""

    grpc_code = "FAILED_PRECONDITION"


@dataclasses.dataclass(frozen=True)
class Request:
    base: Base
    adds: tuple[Add, ...]
    output: Output
    cache: str
    examples: str  # tfdist's examples/ to put in the image ("" for none)


@dataclasses.dataclass(frozen=True)
class Result:
    digest: str
    output: Output
    built: bool  # False: every layer and the output were there already


def default_cache() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfdist", "images")


def tool(name: str, why: str) -> str:
    found = shutil.which(name) or (shutil.which(name, path=os.path.dirname(sys.executable)) if name == "uv" else None)
    if not found:
        fix = "pip install uv" if name == "uv" else f"apt-get install {name} (Debian, Ubuntu)"
        raise ImageBuildError(f"tfdist kubernetes image needs `{name}` ({why}) and found none on PATH: {fix}")
    return found


def run(argv: list[str], what: str, env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """Runs one tool; its stdout, or ImageBuildError with its last lines of output."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT, stdin=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})}, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise ImageBuildError(f"{what}: `{argv[0]}` did not finish within {TOOL_TIMEOUT:g}s") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise ImageBuildError(f"{what} failed (`{' '.join(argv[:4])} ...` exit {done.returncode}): {tail}")
    return done.stdout


class Builder:
    def __init__(self, request: Request, say: Callable[[str], None]):
        self.request, self.say = request, say
        self.cache = private_dir(request.cache)
        self.layout = os.path.join(self.cache, "layout")
        self.umoci = tool("umoci", "it assembles the image's layers")
        self.skopeo = tool("skopeo", "it copies images in and out")
        self.built_any = False

    def build(self) -> Result:
        fd = open_private(os.path.join(self.cache, "lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one build at a time per cache: they share the layout's index
            work = os.path.join(private_dir(os.path.join(self.cache, "work")), str(os.getpid()))
            shutil.rmtree(work, ignore_errors=True)
            os.mkdir(work, 0o700)
            try:
                return self._build(work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        finally:
            os.close(fd)

    def _step(self, tag: str, what: str, make: Callable[[], None]) -> str:
        if base_scan.manifest_digest(self.layout, tag):
            self.say(f"{what}: cached ({tag})")
            return tag
        started = time.monotonic()
        make()
        self.built_any = True
        self.say(f"{what}: built in {time.monotonic() - started:.1f}s ({tag})")
        return tag

    def _build(self, work: str) -> Result:
        if not os.path.exists(os.path.join(self.layout, "index.json")):
            run([self.umoci, "init", "--layout", self.layout], "creating the cache's OCI layout")
        base = self.request.base
        digest = self._base_digest(base)
        bkey = plan.base_key(base.flavour, digest)
        base_tag = self._step(f"base-{bkey}", "base " + (base.ref or f"Debian {plan.SUITE} (mmdebstrap)"),
                              lambda: self._make_base(base, f"base-{bkey}", work))
        files = self._facts(bkey, base_tag)
        python = base_scan.choose_python(files, base.ref or f"Debian {plan.SUITE}")
        self.say(f"python: {python.path} (Python {python.version}); tfdist's packages go to {plan.SITE}, after "
                 f"{python.site_dir}")
        with open(plan.lock_path(base.flavour)) as f:
            lock_text = f.read()
        deps_tag = f"deps-{plan.deps_key(bkey, python, lock_text)}"
        self._step(deps_tag, f"python packages (locks/{plan.lock_name(base.flavour)}.txt)",
                   lambda: self._make_deps(base_tag, deps_tag, python, work))
        passwd, group = (files.contents.get(f"etc/{n}", b"") for n in ("passwd", "group"))
        examples = self.request.examples
        tkey = plan.tfdist_key(deps_tag, python, _tree_digest(_package_dirs()),
                               _tree_digest([examples]) if examples else "", passwd, group)
        tfdist_tag = self._step(f"tfdist-{tkey}", "tfdist", lambda: self._make_tfdist(
            deps_tag, f"tfdist-{tkey}", python, passwd, group, work))
        env = plan.image_env(files.env)
        adds_digest = _tree_digest([a.src for a in self.request.adds], [a.dest for a in self.request.adds])
        image_tag = f"image-{plan.image_key(tfdist_tag, adds_digest, env)}"
        self._step(image_tag, "your files and the config", lambda: self._make_image(tfdist_tag, image_tag, env, work))
        digest = base_scan.manifest_digest(self.layout, image_tag) or ""
        self._export(image_tag, digest, work)
        return Result(digest, self.request.output, self.built_any)

    def _base_digest(self, base: Base) -> str:
        if base.flavour != "custom":
            return ""
        if base.pinned:
            return base.ref.rsplit("@", 1)[1]
        return run([self.skopeo, "inspect", "--format", "{{.Digest}}", base.ref], f"reading the base {base.ref}").strip()

    def _make_base(self, base: Base, tag: str, work: str) -> None:
        if base.flavour == "custom":
            run([self.skopeo, "copy", "--quiet", base.ref, f"oci:{self.layout}:{tag}"], f"copying the base {base.ref}")
            return
        rootfs = os.path.join(work, "rootfs.tar")
        argv = plan.mmdebstrap_argv(rootfs)
        argv[0] = tool("mmdebstrap", "it builds the Debian base")
        run(argv, f"building Debian {plan.SUITE} with mmdebstrap", env={"SOURCE_DATE_EPOCH": str(plan.EPOCH)})
        run([self.umoci, "new", "--image", f"{self.layout}:{tag}"], "starting the image")
        run(plan.add_layer_argv(f"{self.layout}:{tag}", tag, rootfs, f"mmdebstrap {plan.SUITE} "
                                + ",".join(plan.DEBIAN_PACKAGES)), "adding the Debian layer")

    def _facts(self, bkey: str, tag: str) -> base_scan.BaseFiles:
        """What the base holds, read once per base (a TensorFlow base is gigabytes) and kept in facts/."""
        path = os.path.join(private_dir(os.path.join(self.cache, "facts")), bkey + ".json")
        try:
            with open(path) as f:
                saved = json.load(f)
            return base_scan.BaseFiles(saved["env"], saved["entries"],
                                       {k: v.encode("latin-1") for k, v in saved["contents"].items()})
        except (FileNotFoundError, ValueError, KeyError):
            pass
        files = base_scan.read_files(self.layout, tag)
        with open(path + ".tmp", "w") as f:
            json.dump({"env": files.env, "entries": files.entries,
                       "contents": {k: v.decode("latin-1") for k, v in files.contents.items()}}, f)
        os.replace(path + ".tmp", path)
        return files

    def _make_deps(self, below: str, tag: str, python: plan.Python, work: str) -> None:
        uv = tool("uv", "it installs the pinned Python packages")
        root = os.path.join(work, "deps")
        target = os.path.join(root, plan.SITE.lstrip("/"))
        argv = plan.uv_install_argv(uv, python, plan.lock_path(self.request.base.flavour), target)
        env = {"UV_CACHE_DIR": os.path.join(self.cache, "uv"), "UV_NO_PROGRESS": "1"}
        try:  # the wheels in the cache first: a rebuild needs no network
            run(argv[:3] + ["--offline"] + argv[3:], "installing the pinned packages offline", env=env)
        except ImageBuildError:
            shutil.rmtree(root, ignore_errors=True)
            run(argv, "installing the pinned packages from PyPI", env=env)
        shutil.rmtree(os.path.join(target, "bin"), ignore_errors=True)  # console scripts for this machine's python
        self._compile(python, target, plan.SITE)
        self._add(below, tag, tarball.tree_entries(target, plan.SITE, bytecode=True), work,
                  f"uv pip install --no-deps -r locks/{plan.lock_name(self.request.base.flavour)}.txt")

    def _compile(self, python: plan.Python, tree: str, dest: str) -> None:
        interpreter = shutil.which(f"python{python.version}")
        if interpreter is None:
            self.say(f"no python{python.version} here to compile bytecode: the image's Python compiles each module "
                     "when it is imported (in memory: user 1000 cannot write beside it)")
            return
        run(plan.compile_argv(interpreter, tree, dest), "compiling bytecode", env={"PYTHONHASHSEED": "0"})

    def _make_tfdist(self, below: str, tag: str, python: plan.Python, passwd: bytes, group: bytes,
                     work: str) -> None:
        root = os.path.join(work, "tfdist", "site")
        for package in _package_dirs():
            shutil.copytree(package, os.path.join(root, os.path.basename(package)),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self._compile(python, root, plan.SITE)
        entries = tarball.tree_entries(root, plan.SITE, bytecode=True)
        import tfdist

        requires = _requires()
        info = f"{plan.SITE}/tfdist-{tfdist.__version__}.dist-info"
        entries += [tarball.Entry(f"{info}/{name}", "file", data=data)
                    for name, data in plan.dist_info(tfdist.__version__, requires).items()]
        entries += [tarball.Entry(f"{plan.BIN}/tfdist", "file", 0o755, data=plan.launcher(python)),
                    tarball.Entry(f"{python.site_dir}/{plan.PTH}", "file", data=plan.pth_line()),
                    tarball.Entry(plan.WORKDIR, "dir", 0o755, plan.UID, plan.GID),
                    tarball.Entry(plan.HOME, "dir", 0o755, plan.UID, plan.GID)]
        if not python.python_on_path:
            entries.append(tarball.Entry(f"{plan.BIN}/python", "symlink", 0o777, target=python.path))
        if os.path.basename(python.path) == "python":
            entries.append(tarball.Entry(f"{plan.BIN}/python3", "symlink", 0o777, target=python.path))
        new_passwd, new_group = plan.with_user(passwd, group)
        entries += [tarball.Entry(f"/etc/{name}", "file", data=data)
                    for name, data in (("passwd", new_passwd), ("group", new_group)) if data is not None]
        if self.request.examples:
            entries += tarball.tree_entries(self.request.examples, plan.EXAMPLES, bytecode=False)
        self._add(below, tag, entries, work, "tfdist " + tfdist.__version__)

    def _make_image(self, below: str, tag: str, env: list[str], work: str) -> None:
        entries = []
        for add in self.request.adds:
            if os.path.isdir(add.src):
                entries += tarball.tree_entries(add.src, add.dest, bytecode=False)
            else:
                entries.append(tarball.Entry(add.dest, "file", 0o755 if os.access(add.src, os.X_OK) else 0o644,
                                             source=add.src))
        if entries:
            entries = plan.owned_by_user(entries)
            self._add(below, tag, entries, work, "your files: " + " ".join(a.dest for a in self.request.adds))
            below = tag
        run(plan.umoci_config_argv(f"{self.layout}:{below}", env, "tfdist kubernetes image: the config")
            + (["--tag", tag] if below != tag else []), "writing the image's config")

    def _add(self, below: str, tag: str, entries: list[tarball.Entry], work: str, what: str) -> None:
        layer = os.path.join(work, tag + ".tar")
        tarball.write(layer, entries)
        run(plan.add_layer_argv(f"{self.layout}:{below}", tag, layer, what), f"adding the layer {tag}")
        os.unlink(layer)

    def _export(self, tag: str, digest: str, work: str) -> None:
        out = self.request.output
        if holds(out, digest):
            self.say(f"{out.ref}: holds it already")
            return
        started = time.monotonic()
        if out.kind == "oci":
            os.makedirs(out.path, exist_ok=True)
            run([self.skopeo, "copy", "--quiet", "--preserve-digests", f"oci:{self.layout}:{tag}", out.ref],
                f"copying the image to {out.ref}")
        else:
            os.makedirs(os.path.dirname(out.path) or ".", exist_ok=True)
            partial = f"{out.path}.partial-{os.getpid()}"
            try:
                run([self.skopeo, "copy", "--quiet", "--preserve-digests", f"oci:{self.layout}:{tag}",
                     f"oci-archive:{partial}:{out.tag}"], f"writing {out.path}")
                os.replace(partial, out.path)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        self.built_any = True
        self.say(f"{out.ref}: written in {time.monotonic() - started:.1f}s")


def holds(out: Output, digest: str) -> bool:
    """Whether the output already holds the image `digest` under its tag (an archive's index.json is read
    from the tar, not unpacked)."""
    if out.kind == "oci":
        return base_scan.manifest_digest(out.path, out.tag) == digest
    try:
        with tarfile.open(out.path) as tar:
            member = tar.extractfile("index.json")
            index = json.load(member) if member else {}
    except (OSError, KeyError, tarfile.TarError, ValueError):
        return False
    return any(m.get("digest") == digest and m.get("annotations", {}).get("org.opencontainers.image.ref.name")
               == out.tag for m in (index.get("manifests") or ()))


def _package_dirs() -> list[str]:
    import importlib

    return [os.path.dirname(os.path.abspath(importlib.import_module(p).__file__ or "")) for p in PACKAGES]


def _requires() -> list[str]:
    from importlib import metadata

    try:
        return list(metadata.requires("tfdist") or ())
    except metadata.PackageNotFoundError:
        return []


def _tree_digest(roots: list[str], extra: list[str] | None = None) -> str:
    """sha256 over every file's path, mode bit and bytes under `roots` (files or directories; bytecode left out)."""
    digest = hashlib.sha256(json.dumps(extra or []).encode())
    for root in roots:
        paths = [root] if os.path.isfile(root) else sorted(
            os.path.join(d, f) for d, dirs, files in os.walk(root) if "__pycache__" not in d.split(os.sep)
            for f in files if not f.endswith((".pyc", ".pyo")))
        for path in paths:
            digest.update(f"{os.path.relpath(path, root)}\0{os.access(path, os.X_OK)}\0".encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()

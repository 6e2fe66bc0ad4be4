"""What `tfdist kubernetes image` is asked for, as values (pure: no file is read, nothing runs).

--base default|lean|IMAGE-REF, --add SRC:DEST, --output oci:DIR[:TAG]|oci-archive:FILE[:TAG], --tag: each parsed
here into a value or refused with one line naming the value and the fix (UsageError: exit 2)."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re

from cluster.client.usage import UsageError

FLAVOURS = ("default", "lean")  # default: the worker image (TensorFlow); lean: the coordinator's (none)
TRANSPORTS = ("docker://", "oci:", "oci-archive:")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # the OCI/Docker tag grammar
_NAME = re.compile(r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*", re.IGNORECASE)
_BASE_EXAMPLES = ("--base default, --base lean, --base docker://nvcr.io/nvidia/tensorflow@sha256:..., "
                  "--base oci:DIR:TAG or --base oci-archive:FILE")


@dataclasses.dataclass(frozen=True)
class Base:
    """The image to build on: one of FLAVOURS (built from Debian's packages), or a user's image as a skopeo
    reference (`ref`); `pinned` when the reference names its digest (a tag can move: the build resolves it)."""

    flavour: str  # "default", "lean" or "custom"
    ref: str = ""
    pinned: bool = False


@dataclasses.dataclass(frozen=True)
class Add:
    """--add SRC:DEST: a file or directory of the user's (absolute path here) put at DEST in the image."""

    src: str
    dest: str


@dataclasses.dataclass(frozen=True)
class Output:
    """Where the image goes: an OCI archive (one tar file: `ctr images import` and `skopeo copy` read it) or an
    OCI layout directory, under `tag`."""

    kind: str  # "oci-archive" or "oci"
    path: str
    tag: str

    @property
    def ref(self) -> str:
        """The skopeo reference."""
        return f"{self.kind}:{self.path}:{self.tag}"


def parse_base(text: str, cwd: str) -> Base:
    if text in FLAVOURS:
        return Base(text)
    if text in ("worker", "debian"):
        return Base("default")
    if text.startswith("docker://"):
        name = text[len("docker://"):]
        _check_docker_name(text, name)
        return Base("custom", text, "@" in name)
    for transport in ("oci-archive:", "oci:"):
        if text.startswith(transport):
            path, tag = _path_and_tag(text[len(transport):], "")
            if not path:
                raise UsageError(f"--base {text!r} names no path: give {transport}PATH[:TAG], e.g. "
                                 f"{transport}{'image.tar' if transport == 'oci-archive:' else 'layout'}:latest")
            ref = f"{transport}{os.path.join(cwd, os.path.expanduser(path))}" + (f":{tag}" if tag else "")
            return Base("custom", ref, False)
    if "@" in text and "://" not in text and not text.startswith(("/", ".")):
        _check_docker_name(text, text)
        return Base("custom", "docker://" + text, True)
    if "://" in text:
        raise UsageError(f"--base {text!r}: skopeo transport {text.split('://')[0]!r} is not one tfdist builds on; "
                         f"give {_BASE_EXAMPLES}")
    raise UsageError(f"--base {text!r} is neither a flavour nor an image reference: give {_BASE_EXAMPLES} "
                     "(a registry image needs docker:// or its @sha256: digest, so the build is pinned)")


def _check_docker_name(text: str, name: str) -> None:
    repo, _, digest = name.partition("@")
    repo_name, _, tag = repo.rpartition(":") if re.search(r":[^/]*$", repo) else (repo, "", "")
    if digest and not _DIGEST.fullmatch(digest):
        raise UsageError(f"--base {text!r}: the digest {digest!r} is not sha256:<64 hex digits>; copy it from "
                         "`skopeo inspect docker://IMAGE` (its Digest)")
    if not _NAME.fullmatch(repo_name) or (tag and not _TAG.fullmatch(tag)):
        raise UsageError(f"--base {text!r} is not an image name; e.g. docker://nvcr.io/nvidia/tensorflow:25.02-tf2-py3 "
                         "or, pinned, docker://NAME@sha256:...")


def _path_and_tag(text: str, default_tag: str) -> tuple[str, str]:
    """`DIR:TAG` -> (DIR, TAG); a colon in the last path component starts the tag (skopeo's own rule)."""
    head, sep, tail = text.rpartition(":")
    if sep and "/" not in tail and _TAG.fullmatch(tail):
        return head, tail
    return text, default_tag


def parse_output(text: str | None, tag: str, default_path: str, cwd: str) -> Output:
    """--output, defaulting to `default_path` (an archive in the cache); --tag is the tag unless the output
    names one."""
    check_tag(tag)
    if text is None:
        return Output("oci-archive", default_path, tag)
    for kind in ("oci-archive", "oci"):
        if text.startswith(kind + ":"):
            path, own_tag = _path_and_tag(text[len(kind) + 1:], tag)
            if not path:
                break
            return Output(kind, os.path.normpath(os.path.join(cwd, os.path.expanduser(path))), own_tag)
    raise UsageError(f"--output {text!r}: give oci-archive:FILE.tar (what `ctr images import` and `skopeo copy` "
                     "read) or oci:DIR[:TAG] (an OCI layout directory)")


def check_tag(tag: str) -> str:
    if not _TAG.fullmatch(tag):
        raise UsageError(f"--tag {tag!r} is not an image tag (letters, digits, '_', '.', '-'; at most 128, not "
                         "starting with '.' or '-'); e.g. --tag worker-1")
    return tag


def parse_add(text: str, cwd: str) -> Add:
    src, sep, dest = text.rpartition(":")
    if not sep or not src or not dest:
        raise UsageError(f"--add {text!r}: give SRC:DEST, e.g. --add train.py:/workspace/train.py "
                         "(SRC on this machine, DEST an absolute path in the image)")
    if not dest.startswith("/") or ".." in dest.split("/") or dest.rstrip("/") == "":
        raise UsageError(f"--add {text!r}: DEST {dest!r} must be an absolute path in the image below / without "
                         "'..', e.g. /workspace/train.py")
    path = os.path.normpath(os.path.join(cwd, os.path.expanduser(src)))
    if not os.path.exists(path):
        raise UsageError(f"--add {text!r}: {path} does not exist; give a file or directory of yours")
    if os.path.islink(path):
        raise UsageError(f"--add {text!r}: {path} is a symlink; give the file or directory itself")
    return Add(path, posixpath.normpath(dest))

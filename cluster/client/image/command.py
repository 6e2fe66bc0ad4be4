"""`tfdist kubernetes image` (and the dispatch of `tfdist kubernetes WHAT`): builds an OCI image without a
Docker daemon, prints what it made, and optionally imports it into a containerd."""

from __future__ import annotations

import argparse
import os
import sys
import time

from cluster.client.image import build, refs
from cluster.client.usage import UsageError

IMAGE_ONLY = ("base", "add", "output", "tag", "cache_dir", "load_into")
CTR_NAMESPACE = "k8s.io"  # the namespace the kubelet's CRI reads images from
BASE_NAME = "localhost/tfdist"


def kubernetes(args: argparse.Namespace) -> int:
    if args.what == "image":
        return build_image(args)
    given = [f"--{name.replace('_', '-')}" for name in IMAGE_ONLY if getattr(args, name, None)]
    if given:
        raise UsageError(f"tfdist kubernetes manifests: only `tfdist kubernetes image` takes {', '.join(given)}; "
                         "leave it out here")
    if not args.image:
        raise UsageError("tfdist kubernetes manifests: --image is required: an image with tfdist that the cluster "
                         "pulls, e.g. --image registry.example.com/tfdist:1 (build one: tfdist kubernetes image)")
    from cluster.client.daemon_commands import print_kubernetes_manifests

    return print_kubernetes_manifests(args)


def examples_dir() -> str:
    """tfdist's examples/ beside its packages (a checkout has it; a wheel does not), or ""."""
    import cluster

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(cluster.__file__))), "examples")
    return path if os.path.isfile(os.path.join(path, "digits", "train.py")) else ""


def request(args: argparse.Namespace, cwd: str) -> build.Request:
    """The build the flags ask for (UsageError, exit 2, for a bad one)."""
    if args.image:
        raise UsageError("tfdist kubernetes image: --image belongs to `tfdist kubernetes manifests` (the image the "
                         "cluster pulls); name what this builds with --tag or --output")
    base = refs.parse_base(args.base or "default", cwd)
    adds = tuple(refs.parse_add(text, cwd) for text in args.add or ())
    cache = os.path.normpath(os.path.join(cwd, os.path.expanduser(args.cache_dir))) if args.cache_dir \
        else build.default_cache()
    tag = refs.check_tag(args.tag or {"default": "worker", "lean": "lean"}.get(base.flavour, "custom"))
    output = refs.parse_output(args.output, tag, os.path.join(cache, f"tfdist-{tag}.tar"), cwd)
    if args.load_into and output.kind != "oci-archive":
        raise UsageError(f"--load-into imports an OCI archive; --output {args.output!r} is a layout directory: give "
                         "--output oci-archive:FILE.tar (or leave --output out)")
    return build.Request(base, adds, output, cache, examples_dir() if base.flavour == "default" else "")


def build_image(args: argparse.Namespace) -> int:
    req = request(args, os.getcwd())
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"tfdist image: {line}", file=sys.stderr, flush=True)

    result = build.Builder(req, say).build()
    took = time.monotonic() - started
    if result.built:
        say(f"done in {took:.1f}s")
    else:
        say(f"nothing to do: the same inputs were built before ({took:.1f}s)")
    if args.load_into:
        load(result.output.path, args.load_into, say)
    print(f"{result.output.ref}@{result.digest}")
    return 0


def ctr_import_argv(archive: str, address: str) -> list[str]:
    """The containerd import a kubelet's CRI sees: `localhost/tfdist:TAG` in namespace k8s.io (pods use it with
    `imagePullPolicy: Never`)."""
    return ["ctr", "--address", address, "--namespace", CTR_NAMESPACE, "images", "import", "--base-name", BASE_NAME,
            archive]


def load(archive: str, address: str, say) -> None:
    if not os.path.exists(address):
        raise UsageError(f"--load-into {address!r}: no containerd socket there; give containerd's address, e.g. "
                         "--load-into /run/containerd/containerd.sock")
    argv = ctr_import_argv(archive, address)
    argv[0] = build.tool("ctr", "it imports the image into containerd")
    started = time.monotonic()
    out = build.run(argv, f"importing {archive} into containerd at {address}")
    say(f"imported into containerd ({CTR_NAMESPACE}) in {time.monotonic() - started:.1f}s: {out.strip()}")

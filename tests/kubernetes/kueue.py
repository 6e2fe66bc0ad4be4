"""A real Kueue (sigs.k8s.io/kueue, its controller manager built from its Go module) on a test control plane,
for the tests of tfdist beside Kueue. Kueue runs as a process on loopback, as the control plane's do: its CRDs
and webhook configurations come from its own module's manifests, the webhooks reach it at
https://127.0.0.1:PORT with a serving certificate of the plane's CA (the documented alternative to its
internal certificate management, which needs an in-cluster Service). Kueue then reads its metrics server's
certificate from a fixed path, /etc/kueue/metrics/certs: it runs in a mount namespace of its own where /etc
is an overlay holding that folder (root, as the suite's real node), and the machine's /etc is never written.
Only the pod integration is on, and its
pod webhooks only see namespaces labelled tfdist.io/kueue=true (OPT_IN): the plane's other tests never meet
it, and a Kueue that stops blocks nobody's pods. `stop()` removes its webhook configurations and its
process; its CRDs stay (another start finds them).

    kueue = Kueue(plane, admin, binary).start()
    ...
    kueue.stop()
"""

from __future__ import annotations

import base64
import copy
import glob
import json
import os
import socket
import subprocess
import time

import yaml

from tests.kubernetes.control_plane import _die_with_parent, _free_port, stop_process

VERSION = "v0.17.0"
OPT_IN = {"tfdist.io/kueue": "true"}  # the namespaces whose pods Kueue's webhooks see
START_TIMEOUT = 60.0
WEBHOOK_CONFIGS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")


def binary() -> str:
    """Kueue's controller manager, built beside the control plane's binaries (build_control_plane.sh)."""
    from tests.kubernetes.control_plane import bin_dir

    return os.path.join(bin_dir(), "kueue")


def module_dir() -> str:
    """Kueue's module, as Go's module cache holds it (the build downloads it)."""
    found = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{VERSION}"], capture_output=True,
                           text=True, timeout=300, check=True).stdout
    return json.loads(found)["Dir"]


def webhook_configurations(manifests: str, port: int, ca_bundle: bytes) -> list[dict]:
    """Kueue's webhook configurations, each webhook's Service replaced by its URL on loopback; only those for
    pods (seeing the OPT_IN namespaces alone) and for Kueue's own kinds."""
    configs = []
    for doc in yaml.safe_load_all(open(manifests)):
        if not doc:
            continue
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": f"kueue-{doc['kind'].replace('WebhookConfiguration', '').lower()}"
                                      "-webhook-configuration"}
        kept = []
        for hook in config.get("webhooks") or ():
            groups = {g for rule in hook.get("rules") or () for g in rule.get("apiGroups") or ()}
            resources = {r for rule in hook.get("rules") or () for r in rule.get("resources") or ()}
            if groups == {""} and resources == {"pods"}:
                hook["namespaceSelector"] = {"matchLabels": dict(OPT_IN)}
            elif groups != {"kueue.x-k8s.io"}:
                continue  # another framework's (batch Jobs, JobSets...): off
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca_bundle).decode()}
            hook["timeoutSeconds"] = 10
            kept.append(hook)
        config["webhooks"] = kept
        configs.append(config)
    return configs


class Kueue:
    def __init__(self, plane, admin, binary: str):
        self.plane, self.admin, self.binary = plane, admin, binary
        self.root = os.path.join(plane.root, "kueue")
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> "Kueue":
        from lightkube import codecs
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
        from lightkube.resources.core_v1 import Namespace

        source = module_dir()
        os.makedirs(os.path.join(self.root, "certs"), mode=0o700, exist_ok=True)
        names = []
        for path in sorted(glob.glob(os.path.join(source, "config/components/crd/bases/*.yaml"))):
            for crd in codecs.load_all_yaml(open(path)):
                names.append(crd.metadata.name)
                if not self._exists(CustomResourceDefinition, crd.metadata.name):
                    self.admin.create(crd)
        self._until("Kueue's CRDs established", lambda: all(any(
            c.type == "Established" and c.status == "True"
            for c in (self.admin.get(CustomResourceDefinition, n).status.conditions or ())) for n in names))
        if not self._exists(Namespace, "kueue-system"):
            self.admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": "kueue-system"}}))
        serving = self.plane.pki.serving("kueue-webhook", ["127.0.0.1"])
        upper, work = os.path.join(self.root, "etc-upper"), os.path.join(self.root, "etc-work")
        metrics = os.path.join(upper, "kueue", "metrics", "certs")  # /etc/kueue/metrics/certs, in its namespace
        for folder in (metrics, work):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        for name, path in (("tls.crt", serving.cert), ("tls.key", serving.key)):
            for into in (os.path.join(self.root, "certs"), metrics):
                with open(path, "rb") as src, open(os.path.join(into, name), "wb") as dst:
                    dst.write(src.read())
        self.port = _free_port()
        config = os.path.join(self.root, "config.yaml")
        with open(config, "w") as f:
            yaml.safe_dump({
                "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
                "health": {"healthProbeBindAddress": "0"}, "metrics": {"bindAddress": "0"},
                "webhook": {"host": "127.0.0.1", "port": self.port, "certDir": os.path.join(self.root, "certs")},
                "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
                "manageJobsWithoutQueueName": False, "integrations": {"frameworks": ["pod"]}}, f)
        log = open(os.path.join(self.root, "kueue.log"), "wb")
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
             'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"',
             "kueue", upper, work, self.binary, f"--config={config}", "--feature-gates=VisibilityOnDemand=false"],
            stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
            cwd=self.root, env={**getattr(self.plane, "_env", os.environ), "KUBECONFIG": self.plane.admin()})  # its marker
        self._wait_listening()
        with open(self.plane.pki.ca, "rb") as f:
            ca = f.read()
        for config_object in webhook_configurations(os.path.join(source, "config/components/webhook/manifests.yaml"),
                                                    self.port, ca):
            self.admin.apply(codecs.from_dict(config_object), force=True)
        return self

    def _exists(self, resource, name: str) -> bool:
        from lightkube import ApiError

        try:
            self.admin.get(resource, name)
            return True
        except ApiError as e:
            if e.status.code == 404:
                return False
            raise

    def _until(self, what: str, probe) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not probe():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {START_TIMEOUT:g}s")
            time.sleep(0.2)

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kueue exited ({self.process.returncode}): {self.log_tail()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"kueue's webhook did not listen on 127.0.0.1:{self.port} within {START_TIMEOUT:g}s: "
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.root, "kueue.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        from lightkube.resources.admissionregistration_v1 import (MutatingWebhookConfiguration,
                                                                   ValidatingWebhookConfiguration)

        for resource, name in zip((MutatingWebhookConfiguration, ValidatingWebhookConfiguration), WEBHOOK_CONFIGS):
            if self._exists(resource, name):
                self.admin.delete(resource, name)
        if self.process is not None:
            stop_process(self.process, 5.0)

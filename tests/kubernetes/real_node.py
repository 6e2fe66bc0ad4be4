"""A real Kubernetes node for tests, joined to the suite's real control plane (tests/kubernetes/control_plane.py):
a private containerd (Debian's, with runc; its own socket, state and config; CNI bridge + host-local +
loopback + portmap from /usr/lib/cni), the kubelet and kube-proxy (nftables mode) of the plane's release, and
CoreDNS as the cluster's DNS, all host processes started and stopped here. Pods run from OCI images loaded
into that containerd (`load_image`); there is no registry, so pods use `imagePullPolicy: Never`.

    node = RealNode(plane, root).start()       # containerd, kubelet, kube-proxy, CoreDNS; Node Ready
    name = node.load_image("image.tar", "localhost/mine:1")
    ...                                         # pods tolerating node.TOLERATION, nodeName or nodeSelector
    node.stop()                                 # nothing left: see leftovers()

Addresses: the node's IP (NODE_IP, in 198.19.0.0/16, on a link of its own: a node IP may not be loopback) and
the pods' (POD_SUBNET in 198.18.0.0/16) are in 198.18.0.0/15, set aside for network tests. The node is
tainted (TAINT) so no other test's pod lands on it, and labelled (LABEL).

One real node on the machine at a time: a kubelet's device-plugin socket, containerd's shim sockets
(/run/containerd/s), the kube-proxy nft table and the kubepods cgroups are machine-wide. `start()` takes a
machine-wide lock (LOCK_FILE) and sweeps what a killed earlier node left; `stop()` removes everything it made
(FACTS.md, "A real kubelet node on this machine kind": sysctls the kubelet and the CNI bridge set, mounts
under its roots, the kubepods cgroups of every hierarchy, the bridge and the node's link, network namespaces,
nft tables and iptables chains, shims that outlive containerd, containerd's containers) and `leftovers()`
names whatever is still there.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from typing import Callable

import yaml

from tests.conftest import processes_whose, processes_with_env
from tests.kubernetes.control_plane import ControlPlane, stop_process
from tests.kubernetes.node import api_forward, images

NODE_NAME = "tfdist-real-node"
NODE_IP = "198.19.200.1"  # on NODE_LINK: the kubelet's address, the InternalIP, CoreDNS's address
POD_SUBNET = "198.18.200.0/24"
NODE_LINK = "tfdnode0"
BRIDGE = "tfdcni0"
CNI_NETWORK = "tfdist-real-node"
RUN_DIR = "/run/tfdist-real-node"  # containerd's socket and state, runc's state; one node at a time
SOCKET = f"{RUN_DIR}/containerd.sock"
LOCK_FILE = "/run/tfdist-real-node.lock"
SESSION_FILE = f"{RUN_DIR}/session.json"  # what the running node owns, for the sweep after a killed session
CONTAINERD_NAMESPACE = "k8s.io"
CNI_BIN = "/usr/lib/cni"
LABEL = {"tfdist.test/real-node": "true"}
TAINT = {"key": "tfdist.test/real-node", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": "tfdist.test/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CLUSTER_DOMAIN = "cluster.local"
COREDNS_USER = "tfdist-coredns"  # least privilege: list/watch what the kubernetes plugin reads
STOP_GRACE = 10.0
START_TIMEOUT = 120.0
LOCK_TIMEOUT = 900.0  # another session's real node module may hold the machine for minutes
# Host settings a kubelet (container manager), the CNI bridge (ip_forward) and kube-proxy may write: read
# before the node starts, written back by stop().
SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
           "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
           "net/bridge/bridge-nf-call-ip6tables", "net/netfilter/nf_conntrack_max",
           "net/netfilter/nf_conntrack_tcp_timeout_established",
           "net/netfilter/nf_conntrack_tcp_timeout_close_wait")
# Machine-wide paths a kubelet, containerd or the CNI plugins make whatever their configuration says.
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd",
              "/var/lib/containerd", "/opt/containerd", "/etc/cni", "/opt/cni", "/etc/kubernetes",
              "/usr/libexec/kubernetes")
# Of those, the ones only a kubelet or containerd uses (one real node at a time): removed whole when the node
# made them; the others only when empty.
OWN_WHOLE = ("/var/lib/kubelet", "/var/log/pods", "/run/containerd")
CGROUP_ROOT = "/sys/fs/cgroup"
KUBEPODS = "kubepods"
NETNS_DIR = "/run/netns"
NETNS_PREFIX = "cni-"  # containerd's CRI names the pods' network namespaces so
IPTABLES_PREFIXES = ("KUBE-", "CNI-")
NFT_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))


class RealNodeError(RuntimeError):
    pass


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run(argv: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RealNodeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------ host state
def mounts_under(prefix: str) -> list[str]:
    """Mount points at or below `prefix`, deepest first. Refuses an empty or root prefix: "everything under
    nothing" is /proc, /sys and /dev/pts of the whole machine."""
    prefix = os.path.normpath(prefix) if prefix else ""
    if not prefix or not os.path.isabs(prefix) or prefix == "/" or len(prefix.strip("/").split("/")) < 2:
        raise RealNodeError(f"refusing to look for mounts under {prefix!r}: not a folder of the node's own")
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_under(prefix: str) -> None:
    for _ in range(5):  # a mount may hide another at the same point
        points = mounts_under(prefix)
        if not points:
            return
        for point in points:
            if _run(["umount", point], check=False).returncode != 0:
                _run(["umount", "-l", point], check=False)


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def _netns() -> set[str]:
    try:
        return {n for n in os.listdir(NETNS_DIR) if n.startswith(NETNS_PREFIX)}
    except FileNotFoundError:
        return set()


def _cgroup_hierarchies() -> list[str]:
    return [os.path.join(CGROUP_ROOT, h) for h in sorted(os.listdir(CGROUP_ROOT))
            if os.path.isdir(os.path.join(CGROUP_ROOT, h)) and not os.path.islink(os.path.join(CGROUP_ROOT, h))]


def _kubepods() -> list[str]:
    return [p for p in (os.path.join(h, KUBEPODS) for h in _cgroup_hierarchies()) if os.path.isdir(p)]


def _cgroup_pids(top: str) -> set[int]:
    pids = set()
    for folder, _, files in os.walk(top):
        if "cgroup.procs" in files:
            for line in (_read(os.path.join(folder, "cgroup.procs")) or "").split():
                pids.add(int(line))
    return pids


def _iptables_chains() -> list[tuple[str, str, str]]:
    """(command, table, chain) of every KUBE-*/CNI-* chain in iptables and ip6tables."""
    found = []
    for command in ("iptables", "ip6tables"):
        if not shutil.which(command):
            continue
        dump = _run([f"{command}-save"], check=False).stdout
        table = ""
        for line in dump.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":") and line[1:].split()[0].startswith(IPTABLES_PREFIXES):
                found.append((command, table, line[1:].split()[0]))
    return found


def _remove_iptables_chains() -> None:
    for command in ("iptables", "ip6tables"):
        if not shutil.which(command):
            continue
        dump = _run([f"{command}-save"], check=False).stdout
        table, ours = "", set()
        rules: list[tuple[str, list[str]]] = []
        for line in dump.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":") and line[1:].split()[0].startswith(IPTABLES_PREFIXES):
                ours.add((table, line[1:].split()[0]))
            elif line.startswith("-A "):
                rules.append((table, line.split()[1:]))
        for table, words in rules:  # jumps into our chains from the others
            chain, rest = words[0], words[1:]
            if (table, chain) not in ours and any((table, w) in ours for w in rest):
                _run([command, "-w", "5", "-t", table, "-D", chain, *_unquote(rest)], check=False)
        for table, chain in ours:
            _run([command, "-w", "5", "-t", table, "-F", chain], check=False)
        for table, chain in ours:
            _run([command, "-w", "5", "-t", table, "-X", chain], check=False)


def _unquote(words: list[str]) -> list[str]:
    """iptables-save quotes comments; re-split them the way a shell would (no shell is run)."""
    import shlex
    return shlex.split(" ".join(words))


def _nft_tables() -> set[tuple[str, str]]:
    out = _run(["nft", "list", "tables"], check=False).stdout
    return {tuple(line.split()[1:3]) for line in out.splitlines() if line.startswith("table ")}


def _sysctl_path(name: str) -> str:
    return os.path.join("/proc/sys", name)


def _processes_with_arg(fragment: str) -> list[int]:
    return processes_whose("cmdline", lambda text: fragment.encode() in text)


def _kill(pids, sig=signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _cpu_seconds(pids) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        stat = _read(f"/proc/{pid}/stat")
        if stat:
            fields = stat.rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return total


# ------------------------------------------------------------------------------------------------ DNS probe
def dns_query(server: str, name: str, port: int = 53, timeout: float = 1.0) -> tuple[int, list[str]]:
    """(rcode, A records) of one UDP query for `name` at `server`: 0 NOERROR, 3 NXDOMAIN, 5 REFUSED."""
    ident = int.from_bytes(os.urandom(2), "big")
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (server, port))
        while True:
            answer = s.recv(4096)
            if answer[:2] == packet[:2]:
                break
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", answer[:12])
    at = 12

    def skip_name(at: int) -> int:
        while True:
            length = answer[at]
            if length >= 0xC0:
                return at + 2
            if length == 0:
                return at + 1
            at += length + 1

    for _ in range(qd):
        at = skip_name(at) + 4
    records = []
    for _ in range(an):
        at = skip_name(at)
        kind, _, _, size = struct.unpack(">HHIH", answer[at:at + 10])
        at += 10
        if kind == 1 and size == 4:
            records.append(socket.inet_ntoa(answer[at:at + 4]))
        at += size
    return flags & 0xF, records


# ------------------------------------------------------------------------------------------------ the node
class RealNode:
    """See the module's docstring. `timings` holds what start() and stop() measured (seconds)."""

    def __init__(self, plane: ControlPlane, root: str, name: str = NODE_NAME, cache: str | None = None,
                 persistent_images: bool = True):
        missing = [p for p in ("kubelet", "kube-proxy", "coredns")
                   if not os.access(os.path.join(plane.binaries, p), os.X_OK)]
        if missing:
            raise RealNodeError(f"{', '.join(missing)} not built in {plane.binaries}: run "
                                f"tests/kubernetes/build_control_plane.sh")
        for program in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "nft", "ip"):
            if not shutil.which(program):
                raise RealNodeError(f"the real node needs {program} (Debian's containerd, runc, nftables, iproute2)")
        if os.geteuid() != 0:
            raise RealNodeError("the real node runs as root (containerd, network namespaces, cgroups)")
        self.plane, self.name = plane, name
        self.root = os.path.abspath(root)
        self.cache = cache or images.cache_dir()
        # Images live in containerd's root: in the cache (imported once, kept between sessions) or in the
        # session's root (imported again each session).
        self.containerd_root = (os.path.join(self.cache, "containerd") if persistent_images
                                else os.path.join(self.root, "containerd-root"))
        self.kubelet_root = os.path.join(self.root, "kubelet")
        self.marker = uuid.uuid4().hex
        self.processes: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self._lock_fd: int | None = None
        self._before: dict = {}
        self.link_kind = ""  # dummy, or ifb where the kernel has no dummy driver (these VMs)
        self._client = None
        self._rbac: list = []
        self.pause_name = ""
        self.node_ip = NODE_IP

    # -------------------------------------------------------------------------------------------- public
    def start(self, timeout: float = START_TIMEOUT) -> "RealNode":
        started = time.monotonic()
        self._lock()
        try:
            self.sweep()
            self._before = self._host_state()
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            os.makedirs(RUN_DIR, mode=0o700, exist_ok=True)
            with open(SESSION_FILE, "w") as f:
                json.dump({"root": self.root, "containerd_root": self.containerd_root, "before": self._before}, f)
            deadline = time.monotonic() + timeout
            self._network()
            self._api_at_node()
            archive, self.pause_name = images.pause_image(self.cache)
            self._start_containerd(deadline)
            self.load_image(archive, self.pause_name)
            self.timings["containerd"] = time.monotonic() - started
            self._rbac_for_coredns()
            self._start_kubelet()
            self._start_kube_proxy()
            self._start_coredns()
            self._wait("kubelet (Node Ready)", self._node_ready, deadline)
            self.timings["node_ready"] = time.monotonic() - started
            self._wait("kube-proxy (its nft rules for the `kubernetes` Service)", self._proxy_ready, deadline)
            self._wait("CoreDNS (kubernetes.default.svc answered)", self._dns_ready, deadline)
            self.timings["start"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def load_image(self, archive: str, name: str, timeout: float = 600) -> str:
        """Imports an OCI archive (an OCI layout as a tar: skopeo's oci-archive, umoci's layout tarred) or a
        docker-save archive into the node's containerd, unpacked for overlayfs, and names it `name` (e.g.
        localhost/tfdist:1) whatever the archive calls it: a full name in index.json
        (io.containerd.image.name), a tag only (org.opencontainers.image.ref.name: taken as `name`'s tag of
        `name`'s repository), RepoTags, or none. Nothing to do when `name` is already there: the node cache
        keeps images between sessions. Returns `name`; pods use it with imagePullPolicy: Never."""
        if self.has_image(name):
            return name
        began = time.monotonic()
        repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
        done = _run(self._ctr("images", "import", "--snapshotter", "overlayfs", "--base-name", repository,
                              "--digests", archive), timeout=timeout, check=False)
        if done.returncode != 0:
            raise RealNodeError(f"containerd did not import {archive}: {done.stderr.strip()[-2000:]}")
        if not self.has_image(name):  # named otherwise in the archive: the image it held, under `name` too
            imported = re.findall(r"^unpacking (\S+) \((sha256:[0-9a-f]+)\)", done.stdout, re.M)
            digests = {digest for _, digest in imported}
            if len(digests) != 1:
                raise RealNodeError(f"{archive} holds {len(digests)} images, not one to name {name}:\n"
                                    f"{done.stdout.strip()[-2000:]}")
            _run(self._ctr("images", "tag", "--force", imported[0][0], name), timeout=60)
        digest_refs = re.findall(r"^unpacking (\S+@sha256:[0-9a-f]+) ", done.stdout, re.M)
        if digest_refs:  # --digests' own names, there for an archive that names nothing: `name` holds it now
            _run(self._ctr("images", "remove", *digest_refs), check=False, timeout=60)
        self.timings[f"import {name}"] = time.monotonic() - began
        return name

    def remove_image(self, name: str) -> None:
        """Removes `name` from the node's containerd and, when no other name holds the same image, the
        reference the CRI plugin keeps for it (its image ID, sha256:CONFIG); containerd's garbage collector
        then drops the content and snapshots no other image uses (the image cache shrinks)."""
        listing = _run(self._ctr("images", "ls"), check=False, timeout=60).stdout.splitlines()[1:]
        manifests = {line.split()[0]: line.split()[2] for line in listing if len(line.split()) > 2}
        if name not in manifests:
            return
        refs = [name]
        config = self._config_digest(manifests[name])
        others = {self._config_digest(m) for ref, m in manifests.items() if ref != name and not ref.startswith("sha256:")}
        if config and config not in others and config in manifests:
            refs.append(config)
        _run(self._ctr("images", "remove", "--sync", *refs), check=False, timeout=300)

    def _config_digest(self, manifest: str) -> str:
        """The image ID (its config's digest) of a manifest (of an index: its linux/amd64 manifest's)."""
        done = _run(self._ctr("content", "get", manifest), check=False, timeout=30)
        try:
            document = json.loads(done.stdout)
        except ValueError:
            return ""
        if "manifests" in document:
            for entry in document["manifests"]:
                platform = entry.get("platform") or {}
                if platform.get("os", "linux") == "linux" and platform.get("architecture", "amd64") == "amd64":
                    return self._config_digest(entry["digest"])
            return ""
        return (document.get("config") or {}).get("digest", "")

    def has_image(self, name: str) -> bool:
        done = _run(self._ctr("images", "ls", "-q"), check=False, timeout=30)
        return name in done.stdout.split()

    def stop(self) -> None:
        """Drains the node (its pods deleted through the API, as a kubelet stops them: CNI DEL, volumes
        unmounted), stops every process and removes what the node made; then leftovers() is empty."""
        began = time.monotonic()
        if self._lock_fd is None:
            return
        try:
            if self.processes.get("kubelet") and self.processes["kubelet"].poll() is None:
                try:
                    self._drain()
                except Exception as e:  # the API or kubelet is gone: the sweep below removes it all
                    print(f"real node: drain skipped ({e})")
            self.timings["cpu_seconds"] = _cpu_seconds(self._pids())
            for name in ("coredns", "kube-proxy", "kubelet"):
                self._stop_process(name)
            self._remove_containers()
            self._stop_process("containerd")
            self.sweep(self._before)
            self._delete_api_objects()
            if getattr(self, "_forward", None) is not None:
                self._forward.close()
            self.processes.clear()
        finally:
            self.timings["stop"] = time.monotonic() - began
            self._unlock()

    def leftovers(self) -> list[str]:
        """What the node made and is still there: empty after stop()."""
        left = []
        if pids := processes_with_env(f"TFDIST_REAL_NODE={self.marker}".encode()):
            left.append(f"processes {pids}")
        if pids := _processes_with_arg(RUN_DIR + "/"):
            left.append(f"processes using {RUN_DIR}: {pids}")
        for prefix in (self.root, RUN_DIR, self.containerd_root):
            if os.path.isabs(prefix) and (points := mounts_under(prefix)):
                left.append(f"mounts {points}")
        if links := _links() & {BRIDGE, NODE_LINK}:
            left.append(f"links {sorted(links)}")
        if netns := _netns() - set(self._before.get("netns", ())):
            left.append(f"network namespaces {sorted(netns)}")
        if groups := [g for g in _kubepods() if g not in self._before.get("kubepods", ())]:
            left.append(f"cgroups {groups}")
        if chains := [c for c in _iptables_chains() if list(c) not in self._before.get("chains", ())]:
            left.append(f"iptables chains {chains}")
        if tables := [t for t in _nft_tables() if t in NFT_TABLES or
                      (list(t) not in self._before.get("nft", ()) and self._empty_nft_table(t))]:
            left.append(f"nft tables {tables}")
        for name, value in self._before.get("sysctls", {}).items():
            if value is not None and _read(_sysctl_path(name)) != value:
                left.append(f"sysctl {name} = {_read(_sysctl_path(name))} (was {value})")
        for path in HOST_PATHS:
            if path not in self._before.get("paths", ()) and os.path.lexists(path):
                left.append(f"path {path}")
        if os.path.exists(RUN_DIR):
            left.append(f"path {RUN_DIR}")
        return left

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            with open(self._logs[name], errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except (KeyError, OSError):
            return ""

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the node's processes (containerd, shims, kubelet, kube-proxy, CoreDNS)
        used so far."""
        return _cpu_seconds(self._pids())

    # -------------------------------------------------------------------------------------------- lock
    def _lock(self) -> None:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    os.close(fd)
                    raise RealNodeError(f"another real node (pid {holder or '?'}) held {LOCK_FILE} for "
                                        f"{LOCK_TIMEOUT:g} s: one real node on the machine at a time")
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -------------------------------------------------------------------------------------------- host state
    def _host_state(self) -> dict:
        return {"sysctls": {name: _read(_sysctl_path(name)) for name in SYSCTLS},
                "paths": [p for p in HOST_PATHS if os.path.lexists(p)],
                "netns": sorted(_netns()), "kubepods": _kubepods(),
                "chains": [list(c) for c in _iptables_chains()], "nft": [list(t) for t in _nft_tables()]}

    def _empty_nft_table(self, table: tuple[str, str]) -> bool:
        out = _run(["nft", "list", "table", *table], check=False).stdout
        return "rule" not in out and not re.search(r"^\s+(ip|meta|jump|counter|ct|tcp|udp)\b", out, re.M)

    def sweep(self, before: dict | None = None) -> None:
        """Removes what a real node leaves on the machine. With no `before`, what an earlier session's node
        (killed before its stop()) recorded in SESSION_FILE; nothing when there was none."""
        if before is None:
            try:
                with open(SESSION_FILE) as f:
                    recorded = json.load(f)
            except (OSError, ValueError):
                if not os.path.exists(RUN_DIR):
                    return
                recorded = {}
            before = recorded.get("before") or {}
            roots = [r for r in (recorded.get("root"), recorded.get("containerd_root")) if r]
        else:
            roots = [self.root, self.containerd_root]
        # processes: the shims (and anything else) using the node's socket, then the containers' processes
        _kill(_processes_with_arg(RUN_DIR + "/"))
        for _ in range(50):
            pids = set()
            for group in _kubepods():
                if group not in before.get("kubepods", ()):
                    pids |= _cgroup_pids(group)
            pids |= set(_processes_with_arg(RUN_DIR + "/"))
            if not pids:
                break
            _kill(pids)
            time.sleep(0.1)
        for prefix in (*roots, RUN_DIR):
            if os.path.isabs(prefix):
                unmount_under(prefix)
        for ns in _netns() - set(before.get("netns", ())):
            _run(["ip", "netns", "delete", ns], check=False)
        for group in _kubepods():
            if group not in before.get("kubepods", ()):
                _remove_cgroup(group)
        for family, table in NFT_TABLES:
            if (family, table) in _nft_tables():
                _run(["nft", "delete", "table", family, table], check=False)
        if any(list(c) not in before.get("chains", ()) for c in _iptables_chains()):
            _remove_iptables_chains()
        for table in _nft_tables():
            if list(table) not in before.get("nft", ()) and table[1] in ("filter", "nat", "mangle") \
                    and self._empty_nft_table(table):
                _run(["nft", "delete", "table", *table], check=False)
        for link in (BRIDGE, NODE_LINK):
            if link in _links():
                _run(["ip", "link", "delete", link], check=False)
        for name, value in (before.get("sysctls") or {}).items():
            if value is not None and _read(_sysctl_path(name)) != value:
                with open(_sysctl_path(name), "w") as f:
                    f.write(value)
        results = "/var/lib/cni/results"
        if os.path.isdir(results):
            for entry in os.listdir(results):
                if entry.startswith(CNI_NETWORK + "-"):
                    os.unlink(os.path.join(results, entry))
        if os.path.isdir("/var/log/containers"):
            for entry in os.listdir("/var/log/containers"):
                path = os.path.join("/var/log/containers", entry)
                if os.path.islink(path) and any(os.readlink(path).startswith(r + "/") for r in roots if r):
                    os.unlink(path)
        for path in HOST_PATHS:
            if before and path not in before.get("paths", ()) and os.path.lexists(path):
                if path in OWN_WHOLE:
                    shutil.rmtree(path, ignore_errors=True)
                else:  # shared with other tools (podman's CNI networks...): only what is empty
                    _remove_empty_folders(path)
        if os.path.exists(RUN_DIR) and not mounts_under(RUN_DIR):
            shutil.rmtree(RUN_DIR, ignore_errors=True)
        for root in roots:  # the session's kubelet and containerd state (not the image cache)
            if root and root != self.containerd_root and os.path.isdir(os.path.join(root, "kubelet")) \
                    and not mounts_under(root):
                shutil.rmtree(os.path.join(root, "kubelet"), ignore_errors=True)

    # -------------------------------------------------------------------------------------------- network
    def _network(self) -> None:
        """The node's link (a dummy, or an ifb where the kernel has no dummy driver) with NODE_IP, and the
        CNI configuration (the bridge itself is made by the bridge plugin at the first pod)."""
        for kind in ("dummy", "ifb"):
            if _run(["ip", "link", "add", NODE_LINK, "type", kind], check=False).returncode == 0:
                self.link_kind = kind
                break
        else:
            raise RealNodeError(f"could not make the node's link {NODE_LINK} (neither dummy nor ifb)")
        _run(["ip", "addr", "add", f"{NODE_IP}/32", "dev", NODE_LINK])
        _run(["ip", "link", "set", NODE_LINK, "up"])
        conf_dir = os.path.join(self.root, "cni", "net.d")
        os.makedirs(conf_dir, mode=0o700, exist_ok=True)
        conf = {"cniVersion": "1.0.0", "name": CNI_NETWORK, "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": os.path.join(self.root, "cni", "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}}]}
        with open(os.path.join(conf_dir, "10-tfdist.conflist"), "w") as f:
            json.dump(conf, f, indent=1)

    # -------------------------------------------------------------------------------------------- containerd
    def _ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", SOCKET, "--namespace", CONTAINERD_NAMESPACE, *args]

    def _write_containerd_config(self, sandbox_image: str) -> str:
        path = os.path.join(self.root, "containerd.toml")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        text = f"""version = 2
root = "{self.containerd_root}"
state = "{RUN_DIR}/containerd"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{SOCKET}"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{RUN_DIR}/opt"
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "{RUN_DIR}/runc-v1"
[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{shutil.which('runc')}"
        Root = "{RUN_DIR}/runc"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{os.path.join(self.root, 'cni', 'net.d')}"
    max_conf_num = 1
"""
        with open(path, "w") as f:
            f.write(text)
        return path

    def _start_containerd(self, deadline: float) -> None:
        os.makedirs(self.containerd_root, mode=0o700, exist_ok=True)
        config = self._write_containerd_config(sandbox_image=self.pause_name)
        for attempt in range(2):
            self._start("containerd", ["containerd", "--config", config])
            self._wait("containerd (its socket)",
                       lambda: _run(self._ctr("version"), check=False, timeout=10).returncode == 0, deadline)
            if not self._remove_containers() or attempt:
                return
            # an earlier session's containers were in the cached root: start again, so that the CRI plugin's
            # own view (read at its start) holds none of them either
            self._stop_process("containerd")

    def _remove_containers(self) -> int:
        """Removes every container of the k8s.io namespace, its task killed first (what a kubelet's GC would
        remove a minute later); how many there were."""
        if "containerd" not in self.processes or self.processes["containerd"].poll() is not None:
            return 0
        tasks = _run(self._ctr("tasks", "ls", "-q"), check=False, timeout=30).stdout.split()
        for task in tasks:
            _run(self._ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task), check=False, timeout=30)
        for task in tasks:
            _run(self._ctr("tasks", "delete", "--force", task), check=False, timeout=30)
        containers = _run(self._ctr("containers", "ls", "-q"), check=False, timeout=30).stdout.split()
        for container in containers:
            _run(self._ctr("containers", "delete", container), check=False, timeout=30)
        return len(containers)

    # -------------------------------------------------------------------------------------------- kubelet
    def _rbac_for_coredns(self) -> None:
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
        from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

        client = self._admin()
        role = ClusterRole(metadata=ObjectMeta(name=COREDNS_USER), rules=[
            PolicyRule(apiGroups=[""], resources=["endpoints", "services", "pods", "namespaces"],
                       verbs=["list", "watch"]),
            PolicyRule(apiGroups=["discovery.k8s.io"], resources=["endpointslices"], verbs=["list", "watch"])])
        binding = ClusterRoleBinding(metadata=ObjectMeta(name=COREDNS_USER),
                                     roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole",
                                                     name=COREDNS_USER),
                                     subjects=[Subject(kind="User", name=COREDNS_USER,
                                                       apiGroup="rbac.authorization.k8s.io")])
        for obj in (role, binding):
            client.apply(obj, force=True)
            self._rbac.append((type(obj), obj.metadata.name))

    def _start_kubelet(self) -> None:
        os.makedirs(self.kubelet_root, mode=0o700, exist_ok=True)
        serving = self.plane.pki.serving(f"kubelet-{self.name}-{self.marker[:8]}", [NODE_IP, self.name])
        self.kubelet_port = _free_port(NODE_IP)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False, "readOnlyPort": 0,
            "address": NODE_IP, "port": self.kubelet_port, "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": self.plane.pki.ca}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": serving.cert, "tlsPrivateKeyFile": serving.key,
            "rotateCertificates": False, "serverTLSBootstrap": False,
            "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": "",
            "containerRuntimeEndpoint": f"unix://{SOCKET}",
            # images are never collected (the test images are loaded, there is no registry to pull again)
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi"},  # only this one: no disk-pressure image GC either
            "makeIPTablesUtilChains": False,  # no KUBE-FIREWALL / KUBE-KUBELET-CANARY / KUBE-IPTABLES-HINT
            "oomScoreAdj": 0,  # -999 needs CAP_SYS_RESOURCE, which root lacks on these VMs
            "podLogsDir": os.path.join(self.root, "pod-logs"),
            "volumePluginDir": os.path.join(self.root, "volume-plugins"),
            "registerWithTaints": [TAINT], "maxPods": 30,
            "syncFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
            "serializeImagePulls": False, "protectKernelDefaults": False,
        }
        path = os.path.join(self.root, "kubelet.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        kubeconfig = self.plane.kubeconfig(f"system:node:{self.name}", ("system:nodes",))
        self._start("kubelet", ["kubelet", f"--config={path}", f"--kubeconfig={kubeconfig}",
                                f"--root-dir={self.kubelet_root}", f"--cert-dir={os.path.join(self.root, 'kubelet-pki')}",
                                f"--hostname-override={self.name}", f"--node-ip={NODE_IP}",
                                "--node-labels=" + ",".join(f"{k}={v}" for k, v in LABEL.items()), "--v=1"],
                    binary=True)

    def _node_ready(self) -> bool:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node

        try:
            node = self._admin().get(Node, self.name)
        except ApiError:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or ()))

    # -------------------------------------------------------------------------------------------- kube-proxy
    def _start_kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "nftables", "clientConnection": {"kubeconfig": self.plane.kubeconfig("system:kube-proxy")},
            "hostnameOverride": self.name, "bindAddress": NODE_IP,
            "healthzBindAddress": f"127.0.0.1:{_free_port('127.0.0.1')}",
            "metricsBindAddress": f"127.0.0.1:{_free_port('127.0.0.1')}",
            "clusterCIDR": POD_SUBNET, "detectLocalMode": "ClusterCIDR", "nodePortAddresses": [f"{NODE_IP}/32"],
            "oomScoreAdj": 0,
            # leave the machine's conntrack settings alone (0: not set)
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "nftables": {"syncPeriod": "30s", "minSyncPeriod": "0s"},
        }
        path = os.path.join(self.root, "kube-proxy.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self._start("kube-proxy", ["kube-proxy", f"--config={path}", "--v=1"], binary=True)

    def _proxy_ready(self) -> bool:
        out = _run(["nft", "list", "table", "ip", "kube-proxy"], check=False, timeout=10).stdout
        return self._kubernetes_service_ip() in out

    def _kubernetes_service_ip(self) -> str:
        if not hasattr(self, "_svc_ip"):
            from lightkube.resources.core_v1 import Service

            self._svc_ip = self._admin().get(Service, "kubernetes", namespace="default").spec.clusterIP
        return self._svc_ip

    # -------------------------------------------------------------------------------------------- CoreDNS
    def _start_coredns(self) -> None:
        kubeconfig = self.plane.kubeconfig(COREDNS_USER)
        corefile = os.path.join(self.root, "Corefile")
        # One server block, for the cluster's zone and reverse lookups: any other name is REFUSED (no
        # upstream, nothing leaves the machine).
        with open(corefile, "w") as f:
            f.write(f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} test
        pods insecure
        ttl 1
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
""")
        self._start("coredns", ["coredns", "-conf", corefile], binary=True)

    def _dns_ready(self) -> bool:
        try:
            rcode, records = dns_query(NODE_IP, f"kubernetes.default.svc.{CLUSTER_DOMAIN}")
        except OSError:
            return False
        return rcode == 0 and self._kubernetes_service_ip() in records

    # -------------------------------------------------------------------------------------------- processes
    def _start(self, name: str, argv: list[str], binary: bool = False) -> None:
        log = os.path.join(self.root, f"{name}.log")
        self._logs[name] = log
        program = os.path.join(self.plane.binaries, argv[0]) if binary else shutil.which(argv[0])
        env = {**os.environ, "TFDIST_REAL_NODE": self.marker}
        if name == "containerd":  # so its shims find runc and the CNI plugins
            env["PATH"] = os.pathsep.join([env.get("PATH", ""), "/usr/sbin", "/sbin"])
        with open(log, "ab") as out:
            self.processes[name] = subprocess.Popen(
                [program, *argv[1:]], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent, cwd=self.root, env=env)

    def _stop_process(self, name: str) -> None:
        proc = self.processes.get(name)
        if proc is not None:
            stop_process(proc, STOP_GRACE)

    def _pids(self) -> list[int]:
        return processes_with_env(f"TFDIST_REAL_NODE={self.marker}".encode())

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float) -> None:
        while True:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RealNodeError(f"{name} exited ({proc.returncode}) while waiting for {what}:\n"
                                        f"{self.log_tail(name)}")
            if ready():
                return
            if time.monotonic() > deadline:
                component = what.split()[0].lower()
                raise RealNodeError(f"{what} did not answer within the real node's start bound; "
                                    f"{component}'s log ends with:\n{self.log_tail(component)}")
            time.sleep(0.1)

    # -------------------------------------------------------------------------------------------- API
    def _api_at_node(self) -> None:
        """Pods reach the API at the `kubernetes` Service (tests/kubernetes/node/api_forward.py)."""
        from lightkube import codecs
        from lightkube.resources.discovery_v1 import EndpointSlice

        self._forward = api_forward.Forwarder(NODE_IP, ("127.0.0.1", self.plane.apiserver_port))
        self._admin().create(codecs.from_dict(api_forward.endpoint_slice(NODE_IP, self._forward.port)))
        self._rbac.append((EndpointSlice, api_forward.SLICE))

    def _admin(self):
        if self._client is None:
            from lightkube import Client, KubeConfig

            self._client = Client(KubeConfig.from_file(self.plane.admin()), field_manager="tfdist-real-node")
        return self._client

    def _drain(self, timeout: float = 60.0) -> None:
        """Cordons the node and deletes its pods (grace 1 s: the kubelet stops them, tears their network
        down and unmounts their volumes); waits for them to be gone and containerd to run no task."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node, Pod

        client = self._admin()
        client.patch(Node, self.name, {"spec": {"unschedulable": True}})
        deadline = time.monotonic() + timeout
        while True:
            pods = list(client.list(Pod, namespace="*", fields={"spec.nodeName": self.name}))
            for pod in pods:
                if pod.metadata.deletionTimestamp is None:
                    try:
                        client.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=1)
                    except ApiError as e:
                        if e.status.code != 404:
                            raise
            tasks = _run(self._ctr("tasks", "ls", "-q"), check=False, timeout=30).stdout.split()
            if not pods and not tasks:
                return
            if time.monotonic() > deadline:
                raise RealNodeError(f"the kubelet did not stop its pods within {timeout:g} s: "
                                    f"{[p.metadata.name for p in pods]}, tasks {tasks}")
            time.sleep(0.2)

    def _delete_api_objects(self) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node

        try:
            client = self._admin()
            for kind, name in [(Node, self.name), *self._rbac]:
                try:
                    client.delete(kind, name)
                except ApiError as e:
                    if e.status.code != 404:
                        raise
        except Exception as e:  # the plane is gone: its objects went with it
            print(f"real node: API objects not deleted ({e})")
        self._rbac = []


def _remove_empty_folders(top: str) -> None:
    for folder, _, _ in sorted(os.walk(top), key=lambda w: w[0].count("/"), reverse=True):
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _remove_cgroup(top: str) -> None:
    """rmdir of a cgroup tree, children first (a cgroup folder holds only the kernel's files)."""
    for _ in range(50):
        for folder, _, _ in sorted(os.walk(top), key=lambda w: w[0].count("/"), reverse=True):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        if not os.path.exists(top):
            return
        _kill(_cgroup_pids(top))
        time.sleep(0.1)

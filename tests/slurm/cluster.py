"""A real Slurm cluster for tests: munged, slurmctld and one slurmd per node, each node a network-namespace
host with its own address and hostname (../shared/FACTS.md has the recipe and its traps). Root only.

    with SlurmCluster(tmp_path, nodes=2, cpus=2) as slurm:
        slurm.run(["sbatch", "--wait", "job.sh"])      # runs where slurmctld is reachable (the ctl host)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time

SUBNET = "198.19.0"  # the multi-host tests use 198.18.0: both can run at once
_counter = itertools.count()


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def have_slurm() -> bool:
    return all(shutil.which(t) for t in ("slurmctld", "slurmd", "srun", "sbatch", "munged", "nsenter", "unshare"))


class SlurmCluster:
    def __init__(self, tmp, nodes: int = 2, cpus: int = 2, gpus: int = 0, extra_conf: str = "",
                 partitions: str = "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP"):
        self.tmp = str(tmp)
        self.node_names = [f"node{i + 1}" for i in range(nodes)]
        self.cpus, self.gpus, self.extra_conf, self.partitions = cpus, gpus, extra_conf, partitions
        self.tag = f"tfs{os.getpid() % 10000}x{next(_counter)}"
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = os.path.join(self.tmp, "slurm.conf")
        self.addresses = {"ctl": f"{SUBNET}.1", **{n: f"{SUBNET}.{i + 2}" for i, n in enumerate(self.node_names)}}

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "SlurmCluster":
        try:
            self._network()
            self._files()
            self._munge()
            self._daemons()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ns(self, host: str) -> str:
        return f"{self.tag}{host}"

    def _network(self) -> None:
        hub = f"{self.tag}hub"
        _ip("netns", "add", hub)
        self.namespaces.append(hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for host, address in self.addresses.items():
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            outer = f"{self.tag}{host}v"[:15]
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", outer, "netns", hub)
            _ip("-n", hub, "link", "set", outer, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _files(self) -> None:
        for d in ("state", "spool", "log"):
            os.makedirs(os.path.join(self.tmp, d), exist_ok=True)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in self.addresses.items())
        with open(os.path.join(self.tmp, "hosts"), "w") as f:
            f.write(hosts)
        # `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts: the ctl host (the login node of
        # `run`) resolves the nodes' names as a real login node does.
        os.makedirs(f"/etc/netns/{self.ns('ctl')}", exist_ok=True)
        with open(f"/etc/netns/{self.ns('ctl')}/hosts", "w") as f:
            f.write(hosts)
        self.munge_socket = os.path.join(self.tmp, "munge.sock")
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        nodes = "".join(f"NodeName={n} NodeAddr={self.addresses[n]} CPUs={self.cpus}{gres} State=UNKNOWN\n"
                        for n in self.node_names)
        t = self.tmp
        conf = f"""ClusterName=tfdist
SlurmctldHost=ctl({self.addresses['ctl']})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket},cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool/%n
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/spool/slurmd-%n.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0,sched_interval=2
SlurmdParameters=config_overrides
KillWait=5
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
{"GresTypes=gpu" if self.gpus else ""}
{self.extra_conf}
{nodes}{self.partitions}
"""
        with open(self.conf, "w") as f:
            f.write(conf)
        if self.gpus:
            devices = os.path.join(t, "dev")
            os.makedirs(devices, exist_ok=True)
            for i in range(self.gpus):
                path = os.path.join(devices, f"gpu{i}")
                if not os.path.exists(path):
                    subprocess.run(["mknod", path, "c", "1", "3"], check=True)
            with open(os.path.join(t, "gres.conf"), "w") as f:
                f.write(f"AutoDetect=off\nName=gpu File={devices}/gpu[0-{self.gpus - 1}]\n")

    @property
    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": self.conf}

    def _munge(self) -> None:
        key = os.path.join(self.tmp, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.procs["munged"] = subprocess.Popen(
            ["munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
             f"--pid-file={self.tmp}/munged.pid", f"--log-file={self.tmp}/log/munged.log",
             f"--seed-file={self.tmp}/munged.seed", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(lambda: os.path.exists(self.munge_socket), "munged's socket")

    def _in_node(self, host: str, command: str) -> list[str]:
        """A command as the init of `host`'s own PID, UTS and mount namespaces, in its network namespace,
        with its hostname and the cluster's /etc/hosts."""
        script = f"hostname {host}; mount --bind {self.tmp}/hosts /etc/hosts; {command} & wait"
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", "unshare", "--uts", "--mount", "--pid", "--fork",
                "--kill-child", "--mount-proc", "sh", "-c", script]

    def _daemons(self) -> None:
        log = open(os.path.join(self.tmp, "log", "daemons.out"), "ab")
        self.procs["slurmctld"] = subprocess.Popen(self._in_node("ctl", f"slurmctld -D -i -f {self.conf}"),
                                                   env=self.env, stdout=log, stderr=log)
        for node in self.node_names:
            self.procs[node] = subprocess.Popen(self._in_node(node, f"slurmd -D -N {node} -f {self.conf}"),
                                                env=self.env, stdout=log, stderr=log)
        self._wait(self._nodes_idle, "every slurmd to register as idle", timeout=60)

    def _nodes_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        return all(states.get(n) == "idle" for n in self.node_names)

    def _wait(self, predicate, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}; logs: {self.logs()}")

    def logs(self) -> dict:
        found = {}
        for name in sorted(os.listdir(os.path.join(self.tmp, "log"))):
            with open(os.path.join(self.tmp, "log", name), errors="replace") as f:
                found[name] = f.read()[-2000:]
        return found

    # ---------------------------------------------------------------- use
    def command(self, args) -> list[str]:
        """`args` run on the ctl host (where slurmctld listens; the login node), e.g. sbatch, squeue, salloc."""
        return ["ip", "netns", "exec", self.ns("ctl"), *args]

    def run(self, args, check: bool = True, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run(self.command(args), env={**self.env, **kwargs.pop("env", {})}, capture_output=True,
                                text=True, timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {result.returncode}: {result.stderr}")
        return result

    def close(self) -> None:
        # The unshare parents ignore SIGTERM (FACTS.md): SIGKILL them; --kill-child ends each PID namespace.
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL if name != "munged" else signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(f"/etc/netns/{self.ns('ctl')}", ignore_errors=True)
        self.namespaces.clear()


if __name__ == "__main__":  # a smoke run: python -m tests.slurm.cluster
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, SlurmCluster(tmp) as cluster:
        print(cluster.run(["sinfo"]).stdout)
        print(cluster.run(["srun", "-N", "2", "--ntasks-per-node=1", "sh", "-c",
                           "echo $(hostname) $SLURM_PROCID $SLURM_JOB_NODELIST"]).stdout)
    sys.exit(0)

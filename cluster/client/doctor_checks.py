"""What `tfdist doctor` concludes about a node: one pure function per check over the facts doctor.py
gathered (each probe bounded), each giving one line: ok, a problem with its fix, or skipped (not needed
for what was asked). A probe that did not answer is a fact too, named in its check's line."""

from __future__ import annotations

import dataclasses
from typing import Sequence

OK, PROBLEM, SKIPPED = "ok", "problem", "skipped"
TESTED_TENSORFLOW = "2.21"  # major.minor: what the extras pin and the suite runs
TESTED_KERAS = "3.15"
GPU_TENSORFLOW = "pip install 'tensorflow[and-cuda]==2.21.*'"
TF_KERAS_INSTALL = "pip install --no-deps 'tf_keras==2.21.*'"  # its metadata would pull `tensorflow` beside -cpu
BUILD_HOROVOD = "tfdist build-horovod"
PORTS_PER_SLOT = 2  # a worker's TensorFlow server, and the rendezvous or store beside it


@dataclasses.dataclass(frozen=True)
class Result:
    name: str
    status: str  # OK, PROBLEM or SKIPPED
    detail: str
    fix: str = ""

    def line(self, width: int = 12) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.status:<8} {self.name + ':':<{width}} {self.detail}{fix}"


@dataclasses.dataclass(frozen=True)
class PythonFacts:
    """What the workers' Python said of itself (doctor_probe.py); `failed`: it did not answer, or crashed."""

    python: str
    failed: str = ""  # "" when the probe answered
    version: str = ""
    tfdist: str = ""  # where `import tfdist` comes from there ("": not importable)
    bootstrap: bool = False  # tfdist's worker start-up is beside it
    tensorflow: str = ""
    tensorflow_error: str = ""
    tensorflow_package: str = ""  # the distribution: tensorflow, tensorflow-cpu...
    cuda: bool = False
    tf_gpus: int = 0
    keras: str = ""
    keras_error: str = ""
    mwms_fix: bool = False
    tf_keras: str = ""
    tf_keras_error: str = ""
    horovod: str = ""
    horovod_error: str = ""
    gloo: bool = False
    horovod_build: str = ""  # tfdist's build id, "" for another build


NVML = "NVML"  # GpuFacts.source where nvidia-smi is not installed and NVML listed the GPUs


@dataclasses.dataclass(frozen=True)
class GpuFacts:
    """Who listed the GPUs: `source` is nvidia-smi's path, or NVML where nvidia-smi is not on PATH ("": neither
    lists any); `visible`: the GPUs CUDA_VISIBLE_DEVICES leaves (None: not set)."""

    source: str
    listed: int = 0
    visible: int | None = None
    failed: str = ""


@dataclasses.dataclass(frozen=True)
class PortFacts:
    low: int
    high: int
    source: str  # where the range comes from, in words
    free: int = 0
    taken: tuple[int, ...] = ()  # the first few
    failed: str = ""  # the range itself is wrong


@dataclasses.dataclass(frozen=True)
class CoordinatorFacts:
    """`outcome`: "" (not asked), ok, denied (the credential was accepted; its kind may not list agents),
    credential (the file is unusable), refused, tls, unreachable, timeout, error."""

    address: str = ""
    outcome: str = ""
    credential: str = ""  # "user alice (FILE)"
    message: str = ""
    agents: int = 0
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class DirFacts:
    what: str
    path: str
    exists: bool
    problem: str = ""  # private_files' one line, when it is not this user's own and private


def check_python(py: PythonFacts, own_python: str) -> Result:
    if py.failed:
        return Result("python", PROBLEM, py.failed, f"`{py.python} -c 'import tensorflow'` shows what it does; on a "
                      "slow node, raise --timeout")
    if not py.tfdist:
        return Result("python", PROBLEM, f"{py.python} (Python {py.version}) cannot import tfdist, which every "
                      "worker imports", f"install tfdist into it ({py.python} -m pip install tfdist-*.whl), or "
                      f"use the Python tfdist runs with ({own_python})")
    start_up = "worker start-up present" if py.bootstrap else "worker start-up MISSING"
    detail = f"{py.python} (Python {py.version}); tfdist from {py.tfdist} ({start_up})"
    if not py.bootstrap:
        return Result("python", PROBLEM, detail, "reinstall tfdist: tfdist/compat/bootstrap/sitecustomize.py is "
                      "part of its wheel")
    return Result("python", OK, detail)


def check_tensorflow(py: PythonFacts) -> Result:
    install = f"{GPU_TENSORFLOW} on a GPU node, pip install 'tfdist[tf]' (tensorflow-cpu) elsewhere"
    if py.failed:
        return Result("tensorflow", SKIPPED, "the Python probe did not answer (above)")
    if not py.tensorflow:
        if py.tensorflow_error:
            return Result("tensorflow", PROBLEM, f"import tensorflow failed: {py.tensorflow_error}",
                          f"reinstall it: {install}")
        return Result("tensorflow", PROBLEM, f"TensorFlow is not installed for {py.python}", install)
    package = f" ({py.tensorflow_package})" if py.tensorflow_package else ""
    if not _minor_is(py.tensorflow, TESTED_TENSORFLOW):
        return Result("tensorflow", PROBLEM, f"{py.tensorflow}{package} is not the TensorFlow tfdist is tested with "
                      f"({TESTED_TENSORFLOW}.x)", install)
    return Result("tensorflow", OK, f"{py.tensorflow}{package}; tfdist is tested with {TESTED_TENSORFLOW}")


def check_keras(py: PythonFacts) -> Result:
    install = f"pip install 'keras=={TESTED_KERAS}.*'"
    if py.failed or not py.tensorflow:
        return Result("keras", SKIPPED, "needs TensorFlow first")
    if not py.keras:
        return Result("keras", PROBLEM, f"import keras failed: {py.keras_error or 'not installed'}", install)
    if not py.keras.startswith("3."):
        return Result("keras", PROBLEM, f"Keras {py.keras} is not Keras 3, which TensorFlow {py.tensorflow} uses",
                      install)
    if not py.mwms_fix:
        return Result("keras", PROBLEM, f"Keras {py.keras}: tfdist's fix for Keras 3 fit under "
                      "MultiWorkerMirroredStrategy does not apply to it (its trainer changed)", install)
    tested = "" if _minor_is(py.keras, TESTED_KERAS) else f" (tested with {TESTED_KERAS})"
    return Result("keras", OK, f"{py.keras}{tested}; tfdist's Keras 3 MWMS fix applies")


def check_tf_keras(py: PythonFacts, mode: str) -> Result:
    if py.failed or not py.tensorflow:
        return Result("tf_keras", SKIPPED, "needs TensorFlow first")
    if not py.tf_keras:
        if py.tf_keras_error:
            return Result("tf_keras", PROBLEM, f"import tf_keras failed: {py.tf_keras_error}", TF_KERAS_INSTALL)
        if mode == "ps":
            return Result("tf_keras", PROBLEM, "not installed; ps mode trains with tf_keras (Keras 3 has no "
                          "parameter-server support)", TF_KERAS_INSTALL)
        return Result("tf_keras", SKIPPED, f"not installed; only ps mode needs it ({TF_KERAS_INSTALL})")
    if not _minor_is(py.tf_keras, ".".join(py.tensorflow.split(".")[:2])):
        return Result("tf_keras", PROBLEM, f"tf_keras {py.tf_keras} does not match TensorFlow {py.tensorflow}",
                      TF_KERAS_INSTALL.replace("2.21", ".".join(py.tensorflow.split(".")[:2])))
    return Result("tf_keras", OK, f"{py.tf_keras} (ps mode)")


def check_gpus(py: PythonFacts, gpus: GpuFacts) -> Result:
    if gpus.failed:
        return Result("gpus", PROBLEM, gpus.failed, "nvidia-smi must list this node's GPUs: check the NVIDIA driver")
    if py.failed or not py.tensorflow:
        return Result("gpus", SKIPPED, "needs TensorFlow first")
    sees = py.tf_gpus
    if not gpus.source:
        if sees:
            return Result("gpus", PROBLEM, f"TensorFlow sees {sees} GPU(s) but nvidia-smi is not on PATH and NVML "
                          "lists none: tfdist's agent counts and assigns GPUs with one of them",
                          "put the NVIDIA driver's nvidia-smi on PATH, or pip install 'tfdist[gpu]' (NVML)")
        return Result("gpus", OK, "none (no nvidia-smi, NVML lists none): a CPU node; agents need --slots N")
    expected = gpus.listed if gpus.visible is None else gpus.visible
    tool = "NVML" if gpus.source == NVML else "nvidia-smi"
    listed = f"{tool} lists {gpus.listed}" + ("" if gpus.visible is None else
                                               f", CUDA_VISIBLE_DEVICES leaves {gpus.visible}")
    if sees == expected:
        return Result("gpus", OK, f"{listed}, TensorFlow sees {sees}")
    if sees == 0 and not py.cuda:
        package = py.tensorflow_package or "tensorflow"
        return Result("gpus", PROBLEM, f"{listed}, TensorFlow sees none: {package} {py.tensorflow} is built without "
                      "CUDA", f"pip uninstall -y {package} && {GPU_TENSORFLOW}")
    return Result("gpus", PROBLEM, f"{listed}, TensorFlow sees {sees}", "TensorFlow's CUDA libraries must match the "
                  f"driver: {GPU_TENSORFLOW} brings them; `python -c \"import tensorflow\"` logs why a GPU is skipped")


def check_horovod(py: PythonFacts, mode: str) -> Result:
    if py.failed or not py.tensorflow:
        return Result("horovod", SKIPPED, "needs TensorFlow first")
    if not py.horovod:
        if py.horovod_error:
            return Result("horovod", PROBLEM, f"horovod.tensorflow does not load with TensorFlow {py.tensorflow}: "
                          f"{py.horovod_error}", f"{BUILD_HOROVOD} (builds it for this TensorFlow)")
        if mode == "horovod":
            return Result("horovod", PROBLEM, "not installed; horovod mode needs it",
                          f"{BUILD_HOROVOD} (about 2 minutes, Gloo only)")
        return Result("horovod", SKIPPED, f"not installed; only horovod mode needs it ({BUILD_HOROVOD})")
    if not py.gloo:
        return Result("horovod", PROBLEM, f"horovod {py.horovod} was built without Gloo, which tfdist starts it "
                      "with", BUILD_HOROVOD)
    build = f"tfdist's build {py.horovod_build}" if py.horovod_build else \
        f"not tfdist's build: ranks on hosts whose name resolves to loopback may fail ({BUILD_HOROVOD} fixes that)"
    return Result("horovod", OK, f"{py.horovod}, built with Gloo; {build}")


def slots_of(gpus: GpuFacts, cpus: int) -> int:
    """The slots a job may use on this node: its GPUs, else one per core."""
    visible = gpus.listed if gpus.visible is None else gpus.visible
    return visible if gpus.source and visible else max(1, cpus)


def check_ports(ports: PortFacts, slots: int) -> Result:
    where = f"{ports.low}-{ports.high} ({ports.source})"
    if ports.failed:
        return Result("ports", PROBLEM, ports.failed, "set TFDIST_PORT_RANGE=LOW-HIGH, e.g. 20000-29999")
    size = ports.high - ports.low + 1
    needed = max(4, PORTS_PER_SLOT * slots)
    detail = f"{where}: {ports.free:,} of {size:,} free"
    if ports.free >= needed:
        return Result("ports", OK, detail)
    taken = ", ".join(str(p) for p in ports.taken)
    return Result("ports", PROBLEM, f"{detail}; {slots} slots need {needed} (taken: {taken})",
                  "stop what holds them (`ss -ltnp`), or choose free ones: TFDIST_PORT_RANGE=LOW-HIGH for local "
                  "launches, `tfdist coordinator --port-range` for a cluster")


COORDINATOR_FIXES = {
    "credential": "",  # the credential's own error says which file or flag
    "refused": "the file is from another cluster's credentials: ask for a new one (`tfdist credentials DIR --user "
               "NAME` on the coordinator's host)",
    "tls": "--coordinator must name the host the credential's certificate was made for (`tfdist credentials --host`)",
    "unreachable": "start `tfdist coordinator --listen HOST:PORT` there, and open that port between this node and it",
    "timeout": "check the address and that no firewall drops the port (a dropped packet waits; a closed port answers)",
    "error": "",
}


def check_coordinator(c: CoordinatorFacts) -> Result:
    if not c.outcome:
        return Result("coordinator", SKIPPED, "no --coordinator or --credentials given (a local launch needs none)")
    if c.outcome in ("ok", "denied"):
        agents = f"; {c.agents} agent(s) registered" if c.outcome == "ok" else ""
        return Result("coordinator", OK, f"{c.address} answered in {c.seconds:.2f} s and accepted the {c.credential}"
                      f"{agents}")
    where = f"{c.address}: " if c.address and c.address not in c.message else ""
    return Result("coordinator", PROBLEM, f"{where}{c.message}", COORDINATOR_FIXES.get(c.outcome, ""))


def check_dirs(dirs: Sequence[DirFacts]) -> list[Result]:
    bad = [Result("dirs", PROBLEM, f"{d.what}: {d.problem}") for d in dirs if d.problem]
    if bad:
        return bad
    shown = "; ".join(f"{d.what} {d.path}" + ("" if d.exists else " (made 0700 when first used)") for d in dirs)
    return [Result("dirs", OK, f"yours and private: {shown}")]


def all_checks(py: PythonFacts, gpus: GpuFacts, ports: PortFacts, coordinator: CoordinatorFacts,
               dirs: Sequence[DirFacts], mode: str, own_python: str, cpus: int) -> list[Result]:
    return [check_python(py, own_python), check_tensorflow(py), check_keras(py), check_tf_keras(py, mode),
            check_gpus(py, gpus), check_horovod(py, mode), check_ports(ports, slots_of(gpus, cpus)),
            check_coordinator(coordinator), *check_dirs(dirs)]


def verdict(results: Sequence[Result]) -> tuple[str, int]:
    """The closing line and the exit code: 0 when nothing is a problem."""
    problems = sum(r.status == PROBLEM for r in results)
    if not problems:
        return "tfdist doctor: no problems found", 0
    return f"tfdist doctor: {problems} problem{'s' if problems > 1 else ''}; fix {'them' if problems > 1 else 'it'} " \
           "before a long run", 1


def _minor_is(version: str, major_minor: str) -> bool:
    return version == major_minor or version.startswith(major_minor + ".")

"""This machine's GPUs, as an agent offers them, a local launch pins them and `tfdist doctor` counts them:
nvidia-smi's, or NVML's where nvidia-smi is not installed, less what CUDA_VISIBLE_DEVICES hides."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping

from cluster.shared.model import Gpu


def discover_gpus(env: Mapping[str, str] | None = None) -> list[Gpu]:
    """The GPUs this agent may hand out: `nvidia-smi --query-gpu=index,uuid,name`, or NVML's answer to
    the same question where nvidia-smi is not installed (containers that mount the driver's library but
    not its tools), restricted to the agent's own CUDA_VISIBLE_DEVICES (indices or UUIDs) when it was
    started under one (e.g. by a cluster manager). Indices are nvidia-smi's: PCI bus order."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    return visible_only(_smi_gpus(smi) if smi else nvml_gpus(), env)


def visible_only(gpus: list[Gpu], env: Mapping[str, str]) -> list[Gpu]:
    """The GPUs of `gpus` that `env`'s CUDA_VISIBLE_DEVICES (indices or UUIDs) leaves; all where it is not set."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return [g for g in gpus if str(g.index) in wanted or g.uuid in wanted]


def _smi_gpus(smi: str) -> list[Gpu]:
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_query(out.stdout) if out.returncode == 0 else []


def nvml_gpus() -> list[Gpu]:
    """NVML's GPUs (`pynvml`, the tfdist[gpu] extra); none when it is not installed or finds no driver.
    NVML numbers devices as nvidia-smi does (it is what nvidia-smi asks)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # not installed, or no driver behind it
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid, name = pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetName(handle)
            gpus.append(Gpu(index, _text(uuid), _text(name)))
        return gpus
    except Exception:  # a device that stopped answering: no GPU is offered rather than a wrong one
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older pynvml returns bytes


def parse_gpu_query(text: str) -> list[Gpu]:
    """Lines of `index, uuid, name` (nvidia-smi's CSV without header); malformed lines are skipped."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].startswith("GPU-"):
            gpus.append(Gpu(int(parts[0]), parts[1], parts[2] if len(parts) > 2 else ""))
    return gpus


def slots_on_gpus(slots: int, found: list[Gpu]) -> tuple[tuple[Gpu, ...], str | None]:
    """The GPUs behind a local launch's `slots` (the first `slots` of this machine's, as an agent offers its
    GPUs as its slots), and a warning where there are GPUs but fewer than the slots: then the slots are CPU
    slots and the GPUs hidden from the workers, as under an agent's --slots, rather than a job that waits
    for GPUs this machine does not have."""
    if not found:
        return (), None
    if slots <= len(found):
        return tuple(found[:slots]), None
    return (), (f"--slots {slots} is more than this machine's {len(found)} GPU{'s' if len(found) != 1 else ''}: "
                f"the workers run on CPU slots and see no GPU; --slots {len(found)} or fewer trains on the GPUs")

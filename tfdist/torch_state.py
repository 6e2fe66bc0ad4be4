"""PyTorch modules' and optimizers' state as a tfdist checkpoint, with the two calls tfdist's checkpointing
makes (`write(prefix) -> path`, `read(path)`), so `tfdist.save_checkpoint` / `restore_checkpoint` record,
keep, prune and restore it as they do a tf.train.Checkpoint:

    state = tfdist.TorchState(model=ddp.module, optimizer=optimizer)
    step = tfdist.restore_checkpoint(state)    # 0 on a fresh start
    ...
    tfdist.save_checkpoint(state, step)

The state dicts go to PREFIX.pt (`torch.save`), then PREFIX.index names them: written last, so a checkpoint
cut short has no index and is not taken as the latest. Read back with `weights_only=True`: tensors and plain
containers only, nothing unpickled that could run code."""

from __future__ import annotations

import json
from typing import Any

from tfdist.checkpointing import write_sealed


class TorchState:
    """`write`/`read` of objects with `state_dict()`/`load_state_dict()`, by name (see the module's docstring)."""

    def __init__(self, **stateful: Any):
        if not stateful:
            raise ValueError("TorchState needs the objects to save by name, e.g. TorchState(model=model, "
                             "optimizer=optimizer)")
        for name, obj in stateful.items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise ValueError(f"TorchState: {name}={type(obj).__name__} has no state_dict()/load_state_dict(); "
                                 "pass modules, optimizers, schedulers or other objects that have both")
        self._stateful = stateful

    def write(self, prefix: str) -> str:
        import torch

        def save(f) -> None:  # the state dicts taken inside: a failing one leaves no index of this step
            torch.save({name: obj.state_dict() for name, obj in self._stateful.items()}, f)

        write_sealed(prefix, ".pt", save, {"objects": sorted(self._stateful)})
        return prefix

    def read(self, path: str) -> "TorchState":
        import torch

        with open(path + ".index") as f:
            names = json.load(f)["objects"]
        if names != sorted(self._stateful):
            raise ValueError(f"checkpoint {path} holds {', '.join(names)}; this TorchState has "
                             f"{', '.join(sorted(self._stateful))}: pass the same names the script saved")
        saved = torch.load(path + ".pt", map_location="cpu", weights_only=True)
        for name, obj in self._stateful.items():
            obj.load_state_dict(saved[name])
        return self

    def expect_partial(self) -> "TorchState":
        return self

"""Pure batch-size arithmetic (Determined's rule: per-slot = global // slots)."""

from __future__ import annotations

import dataclasses

from tfdist.errors import UserError


class BatchSizeError(UserError, ValueError):
    """The global batch size cannot be split over the job's slots."""


@dataclasses.dataclass(frozen=True)
class BatchSizes:
    global_batch_size: int  # as configured
    slots: int
    per_replica: int  # global // slots
    per_worker: int  # per_replica * replicas driven by one process
    dropped: int  # global % slots: samples per step that no replica gets

    @property
    def effective_global(self) -> int:
        return self.per_replica * self.slots

    def remainder_warning(self) -> str | None:
        if not self.dropped:
            return None
        return (
            f"global_batch_size={self.global_batch_size} is not divisible by "
            f"{self.slots} slots: per-replica batch size is {self.per_replica}, "
            f"the remainder of {self.dropped} sample(s) per step is dropped "
            f"(effective global batch size {self.effective_global}). Use a "
            f"multiple of {self.slots} to keep every sample."
        )


def split_batch(global_batch_size: int, slots: int, local_slots: int = 1) -> BatchSizes:
    """Splits `global_batch_size` over `slots` replicas.

    `local_slots` is the number of replicas one worker process drives (1 for
    CPU slots, the GPU count of a node for GPU nodes).
    """
    if slots < 1:
        raise BatchSizeError(f"slots must be at least 1, got {slots}")
    if not 1 <= local_slots <= slots:
        raise BatchSizeError(f"local_slots must be in 1..{slots}, got {local_slots}")
    if global_batch_size < slots:
        raise BatchSizeError(
            f"hyperparameters.global_batch_size={global_batch_size} is smaller than "
            f"the {slots} slots: every replica needs at least one sample. Use a "
            f"global_batch_size of at least {slots}, or fewer slots."
        )
    per_replica = global_batch_size // slots
    return BatchSizes(
        global_batch_size=global_batch_size,
        slots=slots,
        per_replica=per_replica,
        per_worker=per_replica * local_slots,
        dropped=global_batch_size % slots,
    )

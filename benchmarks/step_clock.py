"""Times `fit` from inside: the seconds between the end of batch `warmup - 1` and the end of batch
`warmup + steps - 1` (the benchmarks' workloads time themselves, so start-up never counts)."""

import time

import keras


class StepClock(keras.callbacks.Callback):
    def __init__(self, warmup: int, steps: int):
        super().__init__()
        self.warmup, self.steps = warmup, steps
        self.start = self.end = None

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.warmup - 1:
            self.start = time.perf_counter()
        if batch == self.warmup + self.steps - 1:
            self.end = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.end - self.start

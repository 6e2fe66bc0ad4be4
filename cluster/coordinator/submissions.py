"""Concurrent submissions, gathered into batches: one lock, one transaction and one fsync for each batch.

Each SubmitJob handler hands its submission to one writer thread and waits for its answer. The writer
takes whatever has arrived (up to MAX_BATCH) and stores it in one event (CoordinatorCore.submit_batch),
made durable before anyone is answered. Under a burst the batches grow and the per-submission cost shrinks:
the handlers no longer queue on the coordinator's lock one by one, each with its own commit. Unloaded, a
batch is one submission and costs one thread hand-over more (tens of microseconds).

A submission is answered within ANSWER_WITHIN seconds or told that the coordinator did not store it in
time; its submission id makes a retry the same job. A stopping queue answers what it holds, then refuses.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from collections.abc import Callable

from cluster.shared.model import JobSpec
from tfdist.errors import InternalError, TfdistError, UnavailableError

log = logging.getLogger("tfdist.coordinator")

MAX_BATCH = 256  # submissions in one transaction
ANSWER_WITHIN = 60.0  # seconds a submission waits for the writer


class _Submission:
    __slots__ = ("spec", "owner", "answer", "done")

    def __init__(self, spec: JobSpec, owner: str):
        self.spec, self.owner = spec, owner
        self.answer: tuple[str, str] | BaseException | None = None
        self.done = threading.Event()


class SubmitQueue:
    """`submit_batch(submissions, now)` is the core's; `clock` gives `now` for each batch."""

    def __init__(self, submit_batch: Callable, clock: Callable[[], float] = time.time):
        self._submit_batch, self._clock = submit_batch, clock
        self._queue: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        self._stopping = False
        self._lock = threading.Lock()  # stopping and handing over: no submission slips in after the drain
        self._thread = threading.Thread(target=self._run, name="submissions", daemon=True)

    def start(self) -> "SubmitQueue":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stores what was handed over before, then refuses the rest."""
        with self._lock:
            self._stopping = True
            self._queue.put(None)
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        self._refuse_the_rest()

    def submit(self, spec: JobSpec, owner: str) -> tuple[str, str]:
        """(job id, state after scheduling), as CoordinatorCore.submit answers, or its error raised."""
        spec.to_json()  # its stored form, made in the handler's thread: the writer only stores
        submission = _Submission(spec, owner)
        with self._lock:
            if self._stopping:
                raise UnavailableError("the coordinator is stopping; submit again when it is back")
            self._queue.put(submission)
        if not submission.done.wait(ANSWER_WITHIN):
            raise UnavailableError(f"the coordinator did not store the submission within {ANSWER_WITHIN:.0f} s (is "
                                   "its state disk stalled?); submit again: its submission id makes it one job")
        if isinstance(submission.answer, BaseException):
            raise submission.answer
        return submission.answer

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._store(batch)

    def _store(self, batch: list[_Submission]) -> None:
        try:
            answers = self._submit_batch([(s.spec, s.owner) for s in batch], self._clock())
        except TfdistError as e:  # the batch failed as a whole (e.g. a full disk): each hears why, in its own copy
            answers = [copy.copy(e) for _ in batch]
        except Exception as e:  # a bug: every waiter answers INTERNAL with it, the writer goes on
            log.exception("storing %d submissions failed", len(batch))
            answers = [InternalError(f"storing {len(batch)} submissions failed: {type(e).__name__}: {e}")
                       for _ in batch]
        except BaseException:  # the process is going down: nobody is left waiting, then it goes on down
            for submission in batch:
                submission.answer = UnavailableError("the coordinator stopped while storing the submission; "
                                                     "submit again when it is back")
                submission.done.set()
            raise
        for submission, answer in zip(batch, answers):
            submission.answer = answer
            submission.done.set()

    def _refuse_the_rest(self) -> None:
        while True:
            try:
                submission = self._queue.get_nowait()
            except queue.Empty:
                return
            if submission is not None:
                submission.answer = UnavailableError("the coordinator stopped before storing the submission; "
                                                     "submit again when it is back")
                submission.done.set()

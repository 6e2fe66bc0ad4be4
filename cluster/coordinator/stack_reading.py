"""Which rank a hung gang waits for, and in what: the collective, the input pipeline or the user's own code.
Read from the Python stacks every rank printed when the step watchdog asked (faulthandler's dump on SIGUSR1,
in the job's logs) and the step each rank last reported. Pure: log lines and steps in, one clause out, which
the job's failure reason, its events and `tfdist launch`'s summary carry (watchdogs.culprit).

A rank's main thread is read from its innermost frame outwards: a frame of a collective library (Horovod,
torch.distributed, JAX's multi-host calls, tf.distribute) or of an input pipeline (tf.data, a DataLoader,
Keras's data adapters) names it; the first frame of the user's own code ends the walk (stdlib and library
frames in between are passed). A compiled step (a tf.function, Keras's jitted JAX step, torch's backward) is
all one frame to Python: its collective, input and compute cannot be told apart, so a rank there is "inside
the training step". In a synchronous gang the ranks that reached the collective (or the compiled step) wait
for the others: of those that did not, the ones at the lowest step are behind."""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Iterable, Mapping, Sequence

from cluster.shared.model import LogLine

FRAME = re.compile(r'^\s+File "(?P<path>[^"]*)", line (?P<line>\d+|\?\?\?) in (?P<function>.+)$')
THREAD = re.compile(r"^(?:Current thread|Thread) (?P<id>0x[0-9a-fA-F]+) \(most recent call first\):$"
                    r"|^Stack \(most recent call first\):$")
STDLIB = re.compile(r"/lib/python\d\.\d+t?/(?!(?:site|dist)-packages/)")
# Where a framework's own files live: a package directory, wherever it was installed (a venv, a cache, a PYTHONPATH)
LIBRARY = re.compile(r"/(?:site|dist)-packages/|/(?:tensorflow|tf_keras|keras|horovod|torch|jax|jaxlib|numpy|"
                     r"tfdist)/")
GENERIC = {"wrapper", "inner", "<lambda>", "<genexpr>", "<listcomp>", "__call__", "error_handler"}


class Kind(enum.Enum):
    COLLECTIVE = "collective"
    STEP = "step"  # inside a compiled step: its collective, input or compute (Python cannot tell them apart)
    INPUT = "input"
    USER = "user"
    OTHER = "other"  # none of those (a library frame, or no Python frame at all)


WAITING = (Kind.COLLECTIVE, Kind.STEP)  # a rank there has reached the gang's collective, or may have

# (kind, words, path): the first that matches a frame's file names it; the input ones come first (tf.distribute's
# distributed dataset is input, the rest of tf.distribute its collectives).
MARKERS = tuple((kind, words, re.compile(path)) for kind, words, path in (
    (Kind.INPUT, "tf.data", r"/tensorflow/python/data/"),
    (Kind.INPUT, "tf.distribute's input", r"/tensorflow/python/distribute/(?:v1/)?input_lib"),
    (Kind.INPUT, "a tf.data py_function", r"/tensorflow/python/ops/script_ops\.py$"),
    (Kind.INPUT, "Keras's data adapter", r"/keras/src/trainers/(?:data_adapters/|epoch_iterator\.py$)"),
    (Kind.INPUT, "tf_keras's data adapter", r"/tf_keras/src/engine/data_adapter\.py$"),
    (Kind.INPUT, "torch DataLoader", r"/torch/utils/data/"),
    (Kind.COLLECTIVE, "Horovod", r"/horovod/"),
    (Kind.COLLECTIVE, "torch.distributed", r"/torch/distributed/"),
    (Kind.COLLECTIVE, "torch DDP", r"/torch/nn/parallel/distributed\.py$"),
    (Kind.COLLECTIVE, "JAX multihost_utils", r"/jax/experimental/multihost_utils\.py$"),
    (Kind.COLLECTIVE, "jax.distributed", r"/jax/_src/distributed\.py$"),
    (Kind.COLLECTIVE, "tf.distribute", r"/tensorflow/python/distribute/"),
    (Kind.COLLECTIVE, "tfdist's collectives", r"/tfdist/collectives\.py$"),
    (Kind.STEP, "TensorFlow", r"/tensorflow/python/eager/"),
    (Kind.STEP, "Keras", r"/keras/src/backend/\w+/trainer\.py$"),
    (Kind.STEP, "torch autograd", r"/torch/autograd/|/torch/_tensor\.py$"),
    (Kind.STEP, "JAX", r"/jax/_src/|/jaxlib/"),
))


@dataclasses.dataclass(frozen=True)
class Frame:
    path: str
    line: str
    function: str

    @property
    def file(self) -> str:
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]

    def at(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"

    @property
    def skipped(self) -> bool:
        """The stdlib's frames and generated code's (`<string>`, `<frozen runpy>`) say nothing of where it is."""
        return self.path.startswith("<") or bool(STDLIB.search(self.path.replace("\\", "/")))

    @property
    def library(self) -> bool:
        return bool(LIBRARY.search(self.path.replace("\\", "/")))


Thread = tuple[Frame, ...]  # innermost frame first, as faulthandler prints them


@dataclasses.dataclass(frozen=True)
class Reading:
    """Where one rank is: `kind`; `words` of the library that says so; `api`, its frame the user's code called
    (or the compiled step's innermost); `user`, the innermost frame of the user's code inside it (its input
    code) or the user's own frame it stands in; `caller`, the user's frame that called into it."""
    kind: Kind
    words: str = ""
    api: Frame | None = None
    user: Frame | None = None
    caller: Frame | None = None
    elsewhere: bool = False  # read from another thread than the main one (a tf.data generator's)

    def says(self) -> str:
        """Where the rank is, as the clause after its rank: `in the user's code at train.py:41 in step`."""
        called = f", from {self.caller.file}:{self.caller.line}" if self.caller else ""
        if self.kind is Kind.USER:
            return f"in the user's code at {self.user.at()}"
        if self.kind is Kind.INPUT and self.user is not None:
            thread = ", on a thread of its own" if self.elsewhere else ""
            return f"in the input pipeline ({self.words}{thread}), in the user's code at {self.user.at()}"
        if self.kind is Kind.INPUT:
            return f"in the input pipeline ({self.words} {self.api.function}{called})"
        if self.kind is Kind.COLLECTIVE:
            return f"in the collective ({self.words} {self.api.function}{called})"
        if self.kind is Kind.STEP:
            return f"inside the training step ({self.words} runs it{called})"
        return f"at {self.api.at()}" if self.api else "with no Python frame in its main thread"

    def waits(self) -> str:
        """The same for a rank that waits for the one behind: in the collective."""
        if self.kind is Kind.STEP:
            called = f", from {self.caller.file}:{self.caller.line}" if self.caller else ""
            return f"in the collective inside the training step ({self.words} runs it{called})"
        return self.says()


def dumps(lines: Iterable[LogLine]) -> dict[int, list[Thread]]:
    """Rank -> the threads of the last stack dump it printed, the main thread last (faulthandler lists the
    newest thread first). Lines of other output between are passed; a thread id seen again starts a new dump."""
    threads: dict[int, list[list[Frame]]] = {}
    ids: dict[int, set[str]] = {}
    for line in lines:
        if line.stream != "stderr":
            continue
        text = line.text.rstrip("\r\n")
        if header := THREAD.match(text):
            seen = ids.setdefault(line.rank, set())
            if header["id"] is None or header["id"] in seen:  # another dump: the last one says where it is now
                threads[line.rank], seen = [], set()
                ids[line.rank] = seen
            seen.add(header["id"] or "")
            threads.setdefault(line.rank, []).append([])
        elif (frame := FRAME.match(text)) and threads.get(line.rank):
            threads[line.rank][-1].append(Frame(frame["path"], frame["line"], frame["function"].strip()))
    return {rank: [tuple(t) for t in found] for rank, found in threads.items() if found}


def mark(frame: Frame) -> tuple[Kind, str] | None:
    path = frame.path.replace("\\", "/")
    return next(((kind, words) for kind, words, pattern in MARKERS if pattern.search(path)), None)


def walk(thread: Thread) -> Reading:
    """One thread, from its innermost frame out (see the module's docstring)."""
    step: tuple[str, Frame] | None = None
    for i, frame in enumerate(thread):
        if frame.skipped:
            continue
        marked = mark(frame)
        if marked is None and not frame.library:  # the user's code
            if step is not None:
                return Reading(Kind.STEP, step[0], step[1], caller=frame)
            outer = next((m for m in map(mark, thread[i + 1:]) if m and m[0] is Kind.INPUT), None)
            return Reading(Kind.INPUT, outer[1], user=frame) if outer else Reading(Kind.USER, user=frame)
        if marked is None:
            continue
        kind, words = marked
        if kind is Kind.STEP:
            step = step or (words, frame)
            continue
        return _called(kind, words, thread[i:])
    if step is not None:
        return Reading(Kind.STEP, step[0], step[1])
    shown = [f for f in thread if not f.skipped] or list(thread)
    return Reading(Kind.OTHER, api=shown[0] if shown else None)


def _called(kind: Kind, words: str, frames: Sequence[Frame]) -> Reading:
    """A library's frames from the innermost one of `kind` out: the outermost of them before the user's code
    (the call the user made), less wrappers, and the user's frame that made it."""
    api, caller = frames[0], None
    for frame in frames:
        if frame.skipped:
            continue
        marked = mark(frame)
        if marked is None and not frame.library:
            caller = frame
            break
        if marked == (kind, words) and frame.function not in GENERIC:
            api = frame
    return Reading(kind, words, api, caller=caller)


def read(threads: Sequence[Thread]) -> Reading:
    """Where a rank is: its main thread (the last); where that is inside a compiled step or an input pipeline
    with no code of the user's in it, a thread busy in the user's input code says more (tf.data runs a
    generator on a thread of its own)."""
    reading = walk(threads[-1])
    if reading.kind in (Kind.STEP, Kind.OTHER) or (reading.kind is Kind.INPUT and reading.user is None):
        for other in map(walk, threads[:-1]):
            if other.kind is Kind.INPUT and other.user is not None:
                return dataclasses.replace(other, elsewhere=True)
    return reading


@dataclasses.dataclass(frozen=True)
class Verdict:
    said: str  # the clause: "rank 1 (node a2) is behind at step 12 (the others at step 13), in ..."
    rank: int | None = None  # the rank behind, when one is


def verdict(stacks: Mapping[int, Sequence[Thread]], steps: Mapping[int, int | None], ranks: Sequence[int],
            node_of_rank: Mapping[int, str], grace: float) -> Verdict:
    """Which of `ranks` (those watched) the others wait for, and where each is. `steps`: rank -> the last step
    it reported (None or absent: none yet); `grace`: how long the stacks had to arrive."""
    readings = {r: read(stacks[r]) for r in ranks if stacks.get(r)}
    missing = [r for r in ranks if r not in readings]
    if not readings:
        return Verdict(f"no stacks arrived from {'rank ' + str(ranks[0]) if len(ranks) == 1 else 'any rank'} "
                       f"within {grace:g}s, so where it is is not known")
    if len(ranks) == 1:
        rank = ranks[0]
        return Verdict(f"from its stack, rank {rank}{_on(node_of_rank, [rank])} stopped {_at(steps.get(rank))}, "
                       f"{readings[rank].says()}", rank)
    waiting = [r for r in readings if readings[r].kind in WAITING]
    elsewhere = [r for r in readings if r not in waiting]
    # The stacks set apart the ranks that did not reach the collective; else only the steps can.
    candidates = elsewhere if elsewhere and waiting else list(ranks)
    lowest = min(_order(steps.get(r)) for r in candidates)
    behind = [r for r in candidates if _order(steps.get(r)) == lowest]
    if len(behind) == len(ranks):  # every rank at the same step, and the stacks set none apart
        behind = []
    parts = [_behind(group, steps, ranks, node_of_rank, readings, grace) for group in _groups(behind, readings)]
    waiters = [r for r in waiting if r not in behind]
    if len(waiters) == len(ranks) and _same(waiters, readings):
        parts.append(f"every rank waits {readings[waiters[0]].waits()}")
    else:
        parts += [f"{_ranks(g)} {_verb(g, 'waits')} {readings[g[0]].waits()}" for g in _groups(waiters, readings)]
    if len(waiters) == len(ranks):
        parts.append("none is behind another in its Python stack: look for a collective the ranks called in a "
                     "different order, or for the network between the nodes")
    others = [r for r in elsewhere if r not in behind]
    parts += [f"{_ranks(g)} {_verb(g, 'is')} {readings[g[0]].says()}" for g in _groups(others, readings)]
    unheard = [r for r in missing if r not in behind]
    if unheard:
        parts.append(f"no stacks arrived from {_ranks(unheard)} within {grace:g}s")
    return Verdict("from the stacks, " + "; ".join(parts), behind[0] if len(behind) == 1 else None)


def _behind(group: Sequence[int], steps: Mapping[int, int | None], ranks: Sequence[int],
            node_of_rank: Mapping[int, str], readings: Mapping[int, Reading], grace: float) -> str:
    step = steps.get(group[0])
    known = sorted({s for r in ranks if r not in group and (s := steps.get(r)) is not None})
    if not known:
        others = ""
    elif known == [step]:
        others = f" (the others at step {step} too)"
    else:
        others = f" (the others at step {known[0]})" if len(known) == 1 else \
            f" (the others at steps {known[0]}-{known[-1]})"
    where = readings[group[0]].says() if group[0] in readings else f"and no stacks arrived from it within {grace:g}s"
    return f"{_ranks(group)}{_on(node_of_rank, group)} {_verb(group, 'is')} behind {_at(step)}{others}, {where}"


def _groups(ranks: Sequence[int], readings: Mapping[int, Reading]) -> list[list[int]]:
    """Ranks that are in the same place, together (a big gang's waiting ranks say it once)."""
    found: dict[str, list[int]] = {}
    for r in sorted(ranks):
        found.setdefault(readings[r].says() if r in readings else "", []).append(r)
    return list(found.values())


def _same(ranks: Sequence[int], readings: Mapping[int, Reading]) -> bool:
    return len({readings[r].waits() for r in ranks}) == 1


def _order(step: int | None) -> int:
    return -1 if step is None else step


def _at(step: int | None) -> str:
    return "before its first step" if step is None else f"at step {step}"


def _ranks(ranks: Sequence[int], shown: int = 8) -> str:
    listed = ", ".join(map(str, ranks[:shown])) + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")
    return f"rank {listed}" if len(ranks) == 1 else f"ranks {listed}"


def _verb(ranks: Sequence[int], verb: str) -> str:
    return verb if len(ranks) == 1 else {"is": "are", "waits": "wait"}[verb]


def _on(node_of_rank: Mapping[int, str], ranks: Sequence[int], shown: int = 4) -> str:
    nodes = list(dict.fromkeys(node_of_rank[r] for r in ranks if r in node_of_rank))
    if not nodes:
        return ""
    listed = ", ".join(nodes[:shown]) + (f" and {len(nodes) - shown} more" if len(nodes) > shown else "")
    return f" (node {listed})" if len(nodes) == 1 else f" (nodes {listed})"

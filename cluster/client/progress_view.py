"""What a follower shows of a job's lines: the quiet view of `tfdist launch`, or the full log of `tfdist logs`.

The quiet view: every line the user's script prints, the chief's Keras progress (step, epoch, loss and
metrics as Keras reports them, steps/s) updated while an epoch runs, and each epoch's final line; TensorFlow's
start-up chatter and known harmless warnings hidden unless `verbose`, the other ranks' duplicate bars unless
`all_ranks` (cluster/shared/output_lines.py says which line is which). The full view (`tfdist logs`) shows
every line, the stream marked. On a terminal the progress is a status line redrawn in place; on a pipe it is a
plain line every PIPE_PROGRESS_EVERY seconds (of the worker's clock), beside each epoch's final line.

`View` decides (pure: lines in, writes and status out); `Renderer` writes (thin).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from typing import Iterable, TextIO

from cluster.shared.output_lines import PROGRESS, Kind, NoiseFilter, bar_rest, bar_step, epoch_of

PIPE_PROGRESS_EVERY = 5.0  # seconds between progress lines written to a pipe (per rank)
MAX_STATUS_LINES = 16  # a terminal's status block, at most (one line per rank shown)


@dataclasses.dataclass(frozen=True)
class ViewOptions:
    verbose: bool = False  # TensorFlow's start-up lines and known harmless warnings shown
    all_ranks: bool = False  # every rank's progress bars, not only the chief's
    full: bool = False  # every line, stream marked, all on stdout (`tfdist logs`): nothing hidden
    progress: bool = True  # transient updates shown (a status line on a terminal, throttled lines on a pipe)


QUIET = ViewOptions()
FULL = ViewOptions(full=True)


@dataclasses.dataclass(frozen=True)
class Write:
    to: str  # "stdout" or "stderr"
    text: str  # one line, without its newline


@dataclasses.dataclass
class _Progress:
    text: str = ""  # the newest update, "" once the rank's bar ended
    epoch: str = ""  # from Keras's `Epoch 3/12` header
    step: int | None = None
    time: float = 0.0
    rate: float | None = None  # steps/s between the last two updates of one epoch
    printed_at: float = float("-inf")  # its last plain line on a pipe (the worker's clock)


class View:
    """Turns a job's lines (pb.LogLine or alike: rank, stream, text, time) into what to write; `status()` is
    the progress to show in place on a terminal (`tty`)."""

    def __init__(self, options: ViewOptions = QUIET, tty: bool = False, pipe_every: float = PIPE_PROGRESS_EVERY):
        self.options, self.tty, self.pipe_every = options, tty, pipe_every
        self._filters: dict[tuple[int, str], NoiseFilter] = {}
        self._progress: dict[int, _Progress] = {}

    def line(self, line) -> list[Write]:
        if line.rank < 0:  # the coordinator's own word about the job (a restart, a resume)
            return [Write("stdout" if self.options.full else "stderr", line.text)]
        if line.stream == PROGRESS:
            return self._update(line)
        found = self._filters.setdefault((line.rank, line.stream), NoiseFilter()).kind(line.text)
        if found is Kind.BAR:
            self._bar_line(line)
        if self.options.full:
            mark = "" if line.stream == "stdout" else f" {line.stream}"
            return [Write("stdout", f"[rank={line.rank}{mark}] {line.text}")]
        text = line.text
        if found is Kind.BAR and not self._shows(line.rank):
            text = bar_rest(text)  # the rank's own print that ended its bar's line (as on a terminal) is shown
        if not text or (found is Kind.NOISE and not self.options.verbose):
            return []
        return [Write("stderr" if line.stream == "stderr" else "stdout", f"[rank={line.rank}] {text}")]

    def status(self) -> list[str]:
        """The progress lines to show in place now (the chief's, or every rank's with all_ranks)."""
        if not (self.tty and self.options.progress):
            return []
        return [self._describe(rank, p) for rank, p in sorted(self._progress.items()) if p.text and self._shows(rank)]

    def _shows(self, rank: int) -> bool:
        return rank == 0 or self.options.all_ranks

    def _update(self, line) -> list[Write]:
        progress = self._progress.setdefault(line.rank, _Progress())
        step = (bar_step(line.text) or (None, None))[0]
        if step is not None and progress.step is not None and step > progress.step and line.time > progress.time:
            progress.rate = (step - progress.step) / (line.time - progress.time)
        elif step is None or progress.step is None or step < progress.step:
            progress.rate = None  # a new bar (the next epoch, or not Keras's): no rate yet
        progress.text, progress.step, progress.time = line.text, step, line.time
        if self.tty or self.options.full or not self.options.progress or not self._shows(line.rank):
            return []  # a terminal redraws status(); the full log on a pipe is its lines, as stored
        if line.time - progress.printed_at < self.pipe_every:
            return []
        progress.printed_at = line.time
        return [Write("stdout", self._describe(line.rank, progress))]

    def _bar_line(self, line) -> None:
        """A rank's final bar line (or an `Epoch N/M` header) ends its transient updates."""
        progress = self._progress.setdefault(line.rank, _Progress())
        epoch = epoch_of(line.text)
        if epoch:
            progress.epoch = epoch
        progress.text, progress.step, progress.rate = "", None, None

    @staticmethod
    def _describe(rank: int, p: _Progress) -> str:
        parts = [f"Epoch {p.epoch}"] if p.epoch else []
        parts.append(_short_bar(p.text.strip()))
        if p.rate is not None:
            parts.append(f"{p.rate:.1f} steps/s")
        return f"[rank={rank}] " + " · ".join(parts)


_BAR_GLYPHS = re.compile(r"━+|\[[=>.]{5,}\]")
BAR_WIDTH = 10


def _short_bar(text: str) -> str:
    """Keras's bar drawn BAR_WIDTH wide, done and to do told apart without colour (Keras 3 draws both parts
    `━` in two colours, which the agent removed): the numbers after it fit on a terminal's line."""
    found = bar_step(text)
    if not found or not found[1]:
        return text
    done = min(BAR_WIDTH, BAR_WIDTH * found[0] // found[1])
    return _BAR_GLYPHS.sub("━" * done + "─" * (BAR_WIDTH - done), text, count=1)


class Renderer:
    """Writes a view: lines to stdout/stderr, the status in place at the bottom of a terminal (stdout). The
    status is taken away before anything else is written to the terminal and drawn again after."""

    def __init__(self, view: View, stdout: TextIO, stderr: TextIO):
        self.view, self.stdout, self.stderr = view, stdout, stderr
        self._shown = 0  # status lines on the screen now

    @classmethod
    def of(cls, options: ViewOptions, stdout: TextIO, stderr: TextIO) -> Renderer:
        return cls(View(options, tty=_isatty(stdout)), stdout, stderr)

    def lines(self, lines: Iterable) -> None:
        writes = [w for line in lines for w in self.view.line(line)]
        if writes or self.view.status():
            self._clear()
            for w in writes:
                (self.stderr if w.to == "stderr" else self.stdout).write(w.text + "\n")
            self._flush()
            self._draw()

    def note(self, text: str) -> None:
        """tfdist's own message (a wait, a reconnect) to stderr, one line."""
        self._clear()
        self.stderr.write(text + "\n")
        self._flush()
        self._draw()

    def close(self) -> None:
        self._clear()
        self._flush()

    def _clear(self) -> None:
        if self._shown:
            up = f"\x1b[{self._shown - 1}A" if self._shown > 1 else ""
            self.stdout.write(f"\r{up}\x1b[J")
            self.stdout.flush()
            self._shown = 0

    def _draw(self) -> None:
        status = self.view.status()
        if status:
            size = shutil.get_terminal_size()
            width = max(20, size.columns - 1)  # a wrapped line could not be redrawn
            rows = max(1, min(MAX_STATUS_LINES, size.lines - 2))  # --all-ranks of a large job
            if len(status) > rows:
                status = status[:rows - 1] + [f"(and {len(status) - rows + 1} more ranks' progress)"]
            self.stdout.write("\n".join(s if len(s) <= width else s[:width - 1] + "…" for s in status))
            self.stdout.flush()
            self._shown = len(status)

    def _flush(self) -> None:
        self.stdout.flush()
        self.stderr.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream
        return False

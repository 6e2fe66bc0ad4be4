"""Splits one worker stream's bytes into lines the way a terminal shows them.

A Keras progress bar is one long line: each update is `\\b...\\r` and the bar again, and the newline comes
only when the epoch ends (Keras 3 draws this way on a pipe too). Read by `\\n` alone, nothing shows while an
epoch runs and a line cut at a length keeps the epoch's first steps instead of its final loss and val_*. So:
a segment ended by `\\r` is a transient update (only the newest is kept, handed on at most once per
`progress_every` seconds), and at `\\n` the line's last segment is its final form (for `text\\r\\n`, the
text). ANSI and other control codes are dropped; a line still longer than MAX_LINE_CHARS keeps its end.

Pure (time is passed in): cluster/agent/gang.py reads the pipes and calls it.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import re

from cluster.shared.output_lines import MAX_LINE_CHARS, clean, keep_end

RAW_LIMIT = 4 * MAX_LINE_CHARS  # raw characters held for one segment (colour codes make raw text longer)
_BREAK = re.compile(r"[\r\n]")


@dataclasses.dataclass(frozen=True)
class Piece:
    text: str
    progress: bool = False  # a transient update (the newest `\r` segment), not a line of the log


class Splitter:
    """One stream of one worker: bytes in (`feed`), pieces out; `end` at the stream's end."""

    def __init__(self, progress_every: float = 1.0):
        self.progress_every = progress_every
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._raw: list[str] = []  # the current segment, as written
        self._raw_len = 0
        self._cut = 0  # raw characters dropped from the current segment's start
        self._last = ""  # this line's newest non-empty `\r` segment
        self._pending: str | None = None  # the newest update not handed on yet
        self._handed_at = -math.inf

    def feed(self, data: bytes, now: float) -> list[Piece]:
        """The pieces `data` completes, and the newest update if one is due (`feed(b"", now)` asks only that)."""
        text = self._decoder.decode(data)
        pieces: list[Piece] = []
        start = 0
        for brk in _BREAK.finditer(text):
            self._add(text[start:brk.start()])
            start = brk.end()
            segment = self._take()
            if brk.group() == "\r":
                if segment:
                    self._last = self._pending = segment
            else:
                pieces.append(Piece(segment or self._last))
                self._last, self._pending = "", None  # the final line supersedes every update of it
        self._add(text[start:])
        return pieces + self._due(now)

    def end(self, now: float) -> list[Piece]:
        """At the stream's end: what is left without a newline is a final line too (a crash mid-epoch keeps
        its last update)."""
        self._add(self._decoder.decode(b"", final=True))
        segment = self._take() or self._last
        self._last, self._pending = "", None
        return [Piece(segment)] if segment else []

    def next_due(self, now: float) -> float | None:
        """Seconds until the held update is due; None when none is held."""
        if self._pending is None:
            return None
        return max(0.0, self._handed_at + self.progress_every - now)

    def _due(self, now: float) -> list[Piece]:
        if self._pending is None or now - self._handed_at < self.progress_every:
            return []
        piece, self._pending, self._handed_at = Piece(self._pending, progress=True), None, now
        return [piece]

    def _add(self, text: str) -> None:
        if not text:
            return
        self._raw.append(text)
        self._raw_len += len(text)
        if self._raw_len > RAW_LIMIT:  # a huge line: keep its newest part
            joined = "".join(self._raw)
            self._cut += len(joined) - RAW_LIMIT // 2
            self._raw, self._raw_len = [joined[-(RAW_LIMIT // 2):]], RAW_LIMIT // 2

    def _take(self) -> str:
        text, cut = clean("".join(self._raw)), self._cut
        self._raw, self._raw_len, self._cut = [], 0, 0
        return keep_end(text, MAX_LINE_CHARS, cut)

"""When an agent says its coordinator is unreachable: at once, then at growing intervals (5 s, doubling up
to a minute) with how long it has been, and once when it is back. The agent keeps retrying every
heartbeat interval meanwhile (its workers keep running); only what it logs backs off. Pure: the time is
passed in, the lines to log are returned."""

from __future__ import annotations

FIRST_GAP = 5.0  # seconds from the first line to the first "still unreachable"
MAX_GAP = 60.0  # the longest gap between two lines


class Unreachable:
    def __init__(self, first_gap: float = FIRST_GAP, max_gap: float = MAX_GAP):
        self.first_gap, self.max_gap = first_gap, max_gap
        self.since: float | None = None  # when the current outage began (None: the coordinator answers)
        self._next = 0.0  # when the next "still unreachable" is due
        self._gap = first_gap

    def failed(self, now: float, error: object) -> str | None:
        """A call failed: the line to log now, if any."""
        if self.since is None:
            self.since, self._gap = now, self.first_gap
            self._next = now + self._gap
            return f"coordinator unreachable ({error}); workers keep running; retrying"
        if now < self._next:
            return None
        self._gap = min(self._gap * 2, self.max_gap)
        self._next = now + self._gap
        return f"coordinator still unreachable after {now - self.since:.0f} s ({error}); retrying"

    def answered(self, now: float) -> str | None:
        """A call succeeded: the line to log if the coordinator was unreachable until now."""
        if self.since is None:
            return None
        down, self.since = now - self.since, None
        return f"coordinator reachable again after {down:.0f} s"

"""`pip install` as a few step lines: what `make demo` and `make venv` show while they install.

pip's own output is either silent for a minute (`-q`) or fifty lines of "Collecting ..."; this runs
pip, keeps its output, and prints one line per step (resolving, installing N packages, done), a
"still ..." line after every 10 s without one, and pip's ERROR lines as they come. When pip fails,
everything it printed follows, then its exit code is ours. Standard library only: it runs with the
venv's fresh Python before anything is installed.

    python tools/pip_steps.py LABEL -- PIP_INSTALL_ARGUMENTS...
"""

from __future__ import annotations

import dataclasses
import os
import queue
import subprocess
import sys
import threading
import time

QUIET_FOR = 10.0  # seconds without a step line before a "still ..." line


@dataclasses.dataclass
class Steps:
    """What pip has done so far, read from its lines (pure: `feed` returns the line to show, if any)."""

    label: str
    phase: str = "resolving"
    collected: int = 0
    installed: int = 0

    def feed(self, line: str, elapsed: float) -> str | None:
        text = line.strip()
        if text.startswith(("Collecting ", "Processing ", "Requirement already satisfied", "Obtaining ")):
            self.collected += 1
        elif text.startswith("Installing collected packages:"):
            names = [n.strip() for n in text.split(":", 1)[1].split(",") if n.strip()]
            self.phase = "installing"
            shown = ", ".join(names[-3:])
            more = f"{len(names) - 3} others and " if len(names) > 3 else ""
            return f"{self.label}: installing {_packages(len(names))} ({more}{shown}), {elapsed:.0f} s so far"
        elif text.startswith("Successfully installed"):
            self.installed = len(text.split()) - 2
            self.phase = "done"
        elif text.startswith("ERROR:"):
            return f"{self.label}: {text}"
        return None

    def still(self, elapsed: float) -> str:
        if self.phase == "resolving":
            return f"{self.label}: still resolving ({self.collected} requirements found, {elapsed:.0f} s)"
        return f"{self.label}: still {self.phase} ({elapsed:.0f} s)"

    def finished(self, elapsed: float) -> str:
        if self.installed:
            return f"{self.label}: installed {_packages(self.installed)} in {elapsed:.0f} s"
        return f"{self.label}: already installed ({elapsed:.0f} s)"


def _packages(count: int) -> str:
    return f"{count} package{'' if count == 1 else 's'}"


def _read(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run(label: str, pip_args: list[str]) -> int:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--progress-bar", "off",
               *pip_args]
    print(f"{label}: pip install {' '.join(pip_args)}", flush=True)
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read, args=(process.stdout, lines), daemon=True).start()
    steps, kept, last_shown = Steps(label), [], start
    while True:
        try:
            line = lines.get(timeout=max(0.1, last_shown + QUIET_FOR - time.monotonic()))
        except queue.Empty:
            print(steps.still(time.monotonic() - start), flush=True)
            last_shown = time.monotonic()
            continue
        if line is None:
            break
        kept.append(line)
        shown = steps.feed(line, time.monotonic() - start)
        if shown:
            print(shown, flush=True)
            last_shown = time.monotonic()
    code = process.wait()
    if code != 0:
        sys.stderr.write("".join(kept))
        sys.stderr.write(f"{label}: pip failed (exit {code}); its output is above\n")
        return code
    print(steps.finished(time.monotonic() - start), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python tools/pip_steps.py LABEL -- PIP_INSTALL_ARGUMENTS...\n")
        return 2
    return run(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m determined.launch.wrap_rank [--no-redirect-stdio] RANK [--] COMMAND`: runs COMMAND with each of its
output lines marked `[rank=RANK] `, as Determined's does, so that the workers a script starts itself (Determined's
Core API tutorial, stage 4) can be told apart in the job's log. Signals it gets are passed on; it exits with the
command's code."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from determined.launch._run import parsed, this_python


def _copy(source, target, prefix: bytes) -> None:
    for line in iter(source.readline, b""):
        target.write(prefix + line)
        target.flush()


def main(argv: list[str]) -> int:
    args = parsed("determined.launch.wrap_rank", argv)
    command, rank, redirect = this_python(list(args.script)), args.rank, args.redirect
    pipe = subprocess.PIPE if redirect else None
    try:
        child = subprocess.Popen(command, stdout=pipe, stderr=pipe)
    except OSError as e:
        print(f"tfdist: wrap_rank: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    copiers = []
    if redirect:
        prefix = f"[rank={rank}] ".encode()
        copiers = [threading.Thread(target=_copy, args=(child.stdout, sys.stdout.buffer, prefix), daemon=True),
                   threading.Thread(target=_copy, args=(child.stderr, sys.stderr.buffer, prefix), daemon=True)]
        for t in copiers:
            t.start()
    code = child.wait()
    for t in copiers:
        t.join(timeout=10)  # a process the command left behind may hold the pipes: its lines are not waited for
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`tfdist build-horovod`: builds horovod 0.28.1 for a Python's TensorFlow, Gloo only, with the script the
package ships (build_horovod.sh beside this file says why the build changes two of Horovod's sources).
It is a command, not a repository tool, so a node that installed tfdist from a wheel can build it too."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

from cluster.client.usage import UsageError
from tfdist.errors import UnavailableError

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_horovod.sh")


def command_line(args: argparse.Namespace, bash: str) -> list[str]:
    """The script's command line for these arguments (pure)."""
    line = [bash, SCRIPT, args.python or sys.executable]
    if args.check:
        line.append("--check")
    if args.sdist:
        line += ["--sdist", os.path.abspath(args.sdist)]
    return line


def _checked(args: argparse.Namespace) -> str:
    """bash, once the arguments are known to be usable; one line naming what is not."""
    bash = shutil.which("bash")
    if not bash:
        raise UsageError("tfdist build-horovod runs a bash script and found no `bash` on PATH: install bash")
    if not os.path.isfile(SCRIPT):
        raise UsageError(f"the Horovod build script is missing from this tfdist ({SCRIPT}): reinstall tfdist")
    python = args.python or sys.executable
    if args.python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(f"--python {args.python!r} is not an executable file: give the path of the Python whose "
                         "TensorFlow Horovod is built for, e.g. /opt/conda/envs/train/bin/python")
    if args.sdist and not os.path.isfile(args.sdist):
        raise UsageError(f"--sdist {args.sdist!r} is not a file: give the path of horovod-0.28.1.tar.gz")
    return bash


def build_horovod(args: argparse.Namespace) -> int:
    """Runs the script in its own process group, so a timeout or Ctrl-C stops pip and the compilers too."""
    process = subprocess.Popen(command_line(args, _checked(args)), start_new_session=True)
    try:
        return process.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise UnavailableError(f"the Horovod build did not finish within {args.timeout:.0f} s and was stopped; "
                                "run it again with a larger --timeout") from None
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise

"""The baseline: what users write by hand. Two processes, TF_CONFIG on two free ports.

    python handwritten_launcher.py NUM_WORKERS script.py [args...]
"""

import json
import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    n = int(sys.argv[1])
    command = [sys.executable, *sys.argv[2:]]
    workers = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    procs = []
    for i in range(n):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                      "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen(command, env=env))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())

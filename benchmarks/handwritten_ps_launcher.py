"""The parameter-server baseline users write by hand: TF_CONFIG for a chief, N workers and one ps on
free ports; the servers never exit, so the launcher kills them when the chief is done.

    python handwritten_ps_launcher.py NUM_WORKERS script.py [args...]
"""

import json
import os
import subprocess
import sys

from handwritten_launcher import free_port  # the same baseline port picking, next to this file


def main() -> int:
    n = int(sys.argv[1])
    command = [sys.executable, *sys.argv[2:]]
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}" for _ in range(n)],
               "ps": [f"127.0.0.1:{free_port()}"]}

    def start(role, index):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": index}}))
        return subprocess.Popen(command, env=env)

    servers = [start("worker", i) for i in range(n)] + [start("ps", 0)]
    try:
        return start("chief", 0).wait()
    finally:
        for p in servers:
            p.kill()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())

"""Ignores SIGTERM (a worker busy in a collective), spawns a child in its process group, and ticks."""
import os
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"rank {os.environ['TFDIST_RANK']} child {child.pid}", flush=True)
while True:
    time.sleep(0.5)

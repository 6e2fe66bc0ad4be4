"""Every rank but the one named joins (as tfdist.init() does: it writes its ready file) and waits;
the named rank hangs before joining, like a worker stuck importing or downloading.

`--squat`: rank 0 also listens on the hanging rank's port (TF_CONFIG's address of it), as another job's
worker or a daemon on that node may once the port number is free: the hanging rank must not count as joined."""
import json
import os
import socket
import sys
import time

rank = int(os.environ["TFDIST_RANK"])
hanging = int(sys.argv[1])
squatter = None
if rank != hanging:
    if "--squat" in sys.argv[2:] and rank == 0:
        port = int(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][hanging].rsplit(":", 1)[1])
        squatter = socket.create_server(("", port))
        print(f"rank 0 listens on rank {hanging}'s port", flush=True)
    with open(os.environ["TFDIST_READY_FILE"], "w") as f:
        f.write(str(os.getpid()))
print(f"rank {rank} up", flush=True)
time.sleep(600)

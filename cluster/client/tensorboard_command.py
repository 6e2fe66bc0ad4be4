"""`tfdist tensorboard ID`: TensorBoard on a job's event files, until Ctrl-C or SIGTERM.

The files are where `MetricsReporter(tensorboard=True)` wrote them, a function of the job's record
(tfdist/event_files.py): <checkpoint_storage>/<job id>/tensorboard, else <working dir>/tfdist-tensorboard/
<job id>. This machine must see that directory: the chief's node, or any machine sharing its filesystem.

TensorBoard runs in this process (its Python API), reading the files with its own TensorFlow stub: no
TensorFlow is loaded and no data-server process started, so stopping this process stops everything. It
listens on loopback unless --host says otherwise: TensorBoard has no login. An optional extra:
`pip install 'tfdist[tensorboard]'`.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import signal
import sys
import threading
import types

from cluster.client import job_commands
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import NotFoundError, UserError
from tfdist.event_files import job_event_dir

INSTALL_HINT = "pip install 'tfdist[tensorboard]'"
NOT_STARTED = ("QUEUED", "STARTING")


def check_installed() -> None:
    """Said before anything is asked of a coordinator."""
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError(f"tfdist tensorboard needs TensorBoard, which is not installed for {sys.executable}: "
                        f"{INSTALL_HINT}")


def event_dir(job: pb.Job) -> str:
    """The job's event-file directory on this machine, or one line saying why there is none to serve."""
    directory = job_event_dir(job.id, job.spec.config.checkpoint_storage, job.spec.working_dir)
    if not directory:
        raise NotFoundError(f"job {job.id} records neither a checkpoint_storage nor a working directory, so it has "
                            "no place for TensorBoard event files; `tensorboard --logdir DIR` serves files "
                            "written with MetricsReporter(tensorboard_dir=DIR)")
    if os.path.isdir(directory):
        return directory
    if job.state in NOT_STARTED:
        raise NotFoundError(f"job {job.id} is {job.state}: no TensorBoard event files yet (they go to {directory})")
    chief = next((p.agent for p in job.placement if p.node_rank == 0), "")
    raise NotFoundError(
        f"job {job.id}: no TensorBoard event files in {directory} on this machine; the job's chief writes them "
        f"there with MetricsReporter(tensorboard=True){f' on node {chief}' if chief else ''}. Without a "
        "filesystem shared with that node, run `tfdist tensorboard` there, or give the job a checkpoint_storage "
        "every node and this machine share")


def start(directory: str, host: str, port: int | None):
    """TensorBoard serving `directory` on a thread of this process; returns its URL."""
    # TensorBoard reads event files through TensorFlow when it can import it (3 s and 500 MB here); this
    # module, TensorBoard's own switch, makes it use its bundled reader instead.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard import program

    server = program.TensorBoard()
    server.configure(logdir=directory, host=host, port=port, load_fast="false")
    try:
        return server.launch()
    except program.TensorBoardServerException as e:
        raise UserError(f"TensorBoard could not listen on {host}:{port if port is not None else 6006}: {e.msg}; "
                        "choose another with --port (0: any free port)") from None


def loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _job(client, args) -> pb.Job:
    return client.job(args.job_id)


def serve(args) -> int:
    check_installed()
    job = job_commands.asks_coordinator(_job)(args)
    directory = event_dir(job)
    url = start(directory, args.host, args.port)
    print(f"TensorBoard for job {job.id} at {url} (event files: {directory}); Ctrl-C stops it", flush=True)
    if not loopback(args.host):
        sys.stderr.write(f"tfdist: TensorBoard has no login: whoever reaches {args.host} sees job {job.id}'s "
                         "metrics\n")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()  # TensorBoard's thread serves; SIGTERM or Ctrl-C ends the wait
    sys.stderr.write(f"tfdist: TensorBoard for job {job.id} stopped\n")
    return 0

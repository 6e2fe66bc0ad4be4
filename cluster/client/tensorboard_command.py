"""`tfdist tensorboard ID`: TensorBoard on a job's event files, until Ctrl-C or SIGTERM.

The files are where `MetricsReporter(tensorboard=True)` wrote them, a function of the job's record
(tfdist/event_files.py): <checkpoint_storage>/<job id>/tensorboard, else <working dir>/tfdist-tensorboard/
<job id>. This machine must see that directory: the chief's node, or any machine sharing its filesystem.

TensorBoard has no login, so it never listens itself: its application runs behind the dashboard's server
and login (cluster/client/tensorboard_app.py), which prints a login link, as `tfdist dashboard` does. It
reads the files with its own TensorFlow stub: no TensorFlow is loaded and no data-server process started,
so stopping this process stops everything. An optional extra: `pip install 'tfdist[tensorboard]'`.
"""

from __future__ import annotations

import sys

from cluster.client import job_commands, tensorboard_app
from cluster.client.tensorboard_app import check_installed, event_dir
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

DEFAULT_PORT = 6006  # TensorBoard's, or the next free one


def _job(client, args) -> pb.Job:
    return client.job(args.job_id)


def serve(args) -> int:
    from cluster.client.dashboard import command, server as http
    from cluster.client.dashboard.api import Answer

    check_installed()
    job = job_commands.asks_coordinator(_job)(args)
    directory = event_dir(job)
    app = tensorboard_app.wsgi_app(directory, tensorboard_app.prefix(job.id))  # before listening: errors first

    def board(job_id: str):
        return app if job_id == job.id else Answer(404, {"error": f"this serves job {job.id}'s TensorBoard only"})

    home = tensorboard_app.prefix(job.id) + "/"
    server, gate = http.serve(None, args.host, args.port, tensorboard=board, home=home, default_port=DEFAULT_PORT)
    try:
        print(f"TensorBoard for job {job.id} at {command.base_url(server, args.host)}{home} (event files: "
              f"{directory}); Ctrl-C stops it\nlog in with {command.login_url(server, gate, args.host)} (keep the "
              "link to yourself: its token is the only way in)", flush=True)
        command.warn_if_exposed(server, args.host, "TensorBoard")
        command.serve_until_stopped(server)
    finally:
        server.server_close()
    sys.stderr.write(f"tfdist: TensorBoard for job {job.id} stopped\n")
    return 0

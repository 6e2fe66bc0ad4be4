"""`python -m cluster.cli`: the command line's module path before cluster/ was grouped by process, kept for
Slurm batch scripts an earlier tfdist wrote (a pending or requeued job runs its script after an upgrade).
tfdist itself runs `python -m cluster.client.cli`."""

from cluster.client.cli import entry_point

if __name__ == "__main__":
    entry_point()

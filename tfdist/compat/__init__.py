"""Version-guarded fixes for upstream bugs that break distributed training."""

# How Horovod gets installed, for every message that says it is missing (the worker start-up in
# bootstrap/sitecustomize.py keeps its own copy: it imports nothing of tfdist at start-up).
HOROVOD_INSTALL_HINT = ("run `tfdist build-horovod` (it builds horovod 0.28.1 for this TensorFlow, Gloo only; "
                        "`make horovod` in a checkout)")

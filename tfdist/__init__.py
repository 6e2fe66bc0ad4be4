"""tfdist: distributed TensorFlow/Keras training, the worker-side library.

    import tfdist
    ctx = tfdist.init(default_hparams={"global_batch_size": 64})
    with ctx.strategy.scope():
        model = build_and_compile()
    model.fit(dataset.batch(ctx.per_worker_batch_size))

Importing tfdist is cheap; TensorFlow is imported by `init()`.
"""

from tfdist.aggregation import aggregate_gradients
from tfdist.checkpointing import CheckpointError, restore_checkpoint, save_checkpoint
from tfdist.context import DistributedContext, context_from_env
from tfdist.data import download
from tfdist.errors import DownloadError, LaunchEnvironmentError, TfdistError
from tfdist.metrics import report_metrics
from tfdist.progress import report_progress
from tfdist.runtime import current, init
from tfdist.saving import save_model, worker_save_path

__version__ = "0.1.0"

__all__ = [
    "DistributedContext", "aggregate_gradients", "DownloadError", "LaunchEnvironmentError", "TfdistError", "context_from_env",
    "CheckpointError", "current", "download", "restore_checkpoint", "save_checkpoint", "init", "report_metrics", "report_progress", "save_model", "worker_save_path", "__version__",
]

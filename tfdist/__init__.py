"""tfdist: distributed TensorFlow/Keras training, the worker-side library.

    import tfdist
    ctx = tfdist.init(default_hparams={"global_batch_size": 64})
    with ctx.strategy.scope():
        model = build_and_compile()
    model.fit(dataset.batch(ctx.per_worker_batch_size))

Importing tfdist is cheap; TensorFlow is imported by `init()`.
"""

import importlib

__version__ = "0.1.0"

# Name -> the module that defines it, imported on first use (PEP 562): the control plane (`tfdist launch`,
# the coordinator, agents) imports tfdist's errors and envvars through this package and must not pay for the
# worker library's modules (0.05 s of every local launch: issue 31); a script's `tfdist.init` is the same.
_EXPORTS = {
    "aggregate_gradients": "tfdist.aggregation", "CheckpointError": "tfdist.checkpointing",
    "restore_checkpoint": "tfdist.checkpointing", "save_checkpoint": "tfdist.checkpointing",
    "DistributedContext": "tfdist.context", "context_from_env": "tfdist.context", "download": "tfdist.data",
    "DownloadError": "tfdist.errors", "LaunchEnvironmentError": "tfdist.errors", "TfdistError": "tfdist.errors",
    "report_metrics": "tfdist.metrics", "report_progress": "tfdist.progress", "current": "tfdist.runtime",
    "init": "tfdist.runtime", "save_model": "tfdist.saving", "TorchState": "tfdist.torch_state",
    "worker_save_path": "tfdist.saving",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # once: later reads are plain attribute reads
        return value
    raise AttributeError(f"module 'tfdist' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "DistributedContext", "aggregate_gradients", "DownloadError", "LaunchEnvironmentError", "TfdistError", "context_from_env",
    "CheckpointError", "current", "download", "restore_checkpoint", "save_checkpoint", "init", "report_metrics", "report_progress", "save_model", "TorchState", "worker_save_path",
    "__version__",
]

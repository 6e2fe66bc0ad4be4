"""What a mode adds to each worker's Python start-up, before the user's script runs: the mode's part of
tfdist/compat/bootstrap/sitecustomize.py, which reads this file by path. So it imports nothing: importing
tfdist there would cost every worker's start its imports, and a script that never imports tfdist gets the
fixes too. A mode that adds nothing has no entry.
"""

from __future__ import annotations


class Startup:
    """A mode's start-up steps."""

    def __init__(self, refuse_keras_3: bool = False, fix_horovod: bool = False,
                 explain_missing: tuple[str, str] | None = None, ready_after: tuple[str, str] | None = None,
                 jax_cluster: bool = False, torch_exit: bool = False):
        # Keras 3 variables under ParameterServerStrategy raise, naming tf.keras (tfdist/compat/keras_ps.py):
        # a refusal, not a patch, so TFDIST_KERAS_PATCH=0 keeps it.
        self.refuse_keras_3 = refuse_keras_3
        # horovod.tensorflow takes Keras 3 variables once it loads (tfdist/compat/keras_horovod.py).
        self.fix_horovod = fix_horovod
        # (package, why): an `import` of the package that nothing finds fails with `why` ({python}: the
        # worker's interpreter), the command that installs it.
        self.explain_missing = explain_missing
        # (module, function): the framework's own rendezvous, after which this worker counts as joined (its
        # startup timeout stops) for scripts that never call tfdist.init() (tfdist/compat/rendezvous.py).
        self.ready_after = ready_after
        # `jax.distributed.initialize()` with no arguments finds tfdist's cluster (tfdist/compat/jax_cluster.py).
        self.jax_cluster = jax_cluster
        # Rank 0 keeps PyTorch's store until every rank has torn its group down (tfdist/compat/torch_exit.py).
        self.torch_exit = torch_exit


NOTHING = Startup()

# Its words are tfdist.compat.HOROVOD_INSTALL_HINT's.
_HOROVOD_MISSING = ("Horovod is not installed for {python}; run `tfdist build-horovod` (it builds horovod 0.28.1 "
                    "for this TensorFlow, Gloo only; `make horovod` in a checkout)")

STARTUP = {
    "ps": Startup(refuse_keras_3=True),
    "horovod": Startup(fix_horovod=True, explain_missing=("horovod", _HOROVOD_MISSING)),
    "jax": Startup(ready_after=("jax.distributed", "initialize"), jax_cluster=True,
                   explain_missing=("jax", "JAX is not installed for {python}; pip install 'tfdist[jax]' into it")),
    "torch": Startup(ready_after=("torch.distributed", "init_process_group"), torch_exit=True,
                     explain_missing=("torch", "PyTorch is not installed for {python}; pip install torch into it")),
}


def startup_of(mode: str) -> Startup:
    return STARTUP.get(mode, NOTHING)

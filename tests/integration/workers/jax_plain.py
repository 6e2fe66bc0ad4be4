"""A plain JAX script for several processes (no Keras, no tfdist import): `jax.distributed.initialize()` with
no arguments, then a cross-process gather. Prints what it joined and gathered."""

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

jax.distributed.initialize()
gathered = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1]))
print(f"process {jax.process_index()} of {jax.process_count()} gathered {gathered.ravel().tolist()}", flush=True)
jax.distributed.shutdown()

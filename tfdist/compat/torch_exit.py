"""PyTorch's rendezvous store (a TCPStore) is served from rank 0's process, by the default process group's
store object: rank 0's `destroy_process_group()` lets it go while another rank may still be tearing its own
group down against it, and that rank aborts. Measured in tfdist's suite (torch 2.15, gloo, two ranks): rank 0
printed "done", destroyed its group; 15 ms later rank 1 died with "terminate called without an active
exception" (SIGABRT) and the job, fully trained, failed. torchrun avoids it by serving the store from its
agent; tfdist's agent is no torch process, so instead rank 0 keeps the store until every rank is done:

  after `init_process_group` returns, rank 0 holds a reference to the store; at exit every other rank
  destroys its group if the script did not, then says it is done through tfdist's own job store (served by
  the agent, not by a rank), and rank 0 waits for all of them (at most EXIT_WAIT seconds) before it lets the
  store go. A rank leaving because it failed does not wait: the launcher stops the others anyway."""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import Any

from tfdist import envvars
from tfdist.exit_watch import watch_for_failure

log = logging.getLogger("tfdist")
SCOPE = "tfdist-torch-exit"  # the job store's keys: one per rank that finished its group's teardown
EXIT_WAIT = 30.0  # seconds rank 0 waits at exit for the others to finish theirs
_KEPT: list[Any] = []  # rank 0: the store, held until the others are done


def after_init(dist: Any) -> None:
    """Called right after `torch.distributed.init_process_group()` returned (tfdist/compat/rendezvous.py)."""
    store_address = os.environ.get(envvars.STORE)
    try:
        rank, size = dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001 - not a default group (a script's own setup): nothing to keep
        return
    if size < 2 or not store_address or getattr(dist, "_tfdist_exit_registered", False):
        return
    dist._tfdist_exit_registered = True
    if rank == 0:
        try:
            _KEPT.append(dist.distributed_c10d._get_default_store())
        except Exception as e:  # noqa: BLE001 - a torch without it: the store goes with the group, as before
            log.debug("torch exit: the default store could not be held: %s", e)
    failed = watch_for_failure()
    atexit.register(_at_exit, dist, rank, size, store_address, failed)


def _at_exit(dist: Any, rank: int, size: int, store_address: str, failed: list) -> None:
    from tfdist.collectives import store_request
    from tfdist.errors import TfdistError

    if failed:
        _KEPT.clear()
        return
    try:
        if rank != 0:
            if dist.is_initialized():  # its group goes now, while rank 0 still serves the store
                dist.destroy_process_group()
            store_request(store_address, "PUT", f"/{SCOPE}/{rank}", b"done", patience=5.0)
            return
        deadline = time.monotonic() + EXIT_WAIT
        waiting = set(range(1, size))
        while waiting and time.monotonic() < deadline:
            waiting = {r for r in waiting
                       if store_request(store_address, "GET", f"/{SCOPE}/{r}", patience=5.0)[0] != 200}
            if waiting:
                time.sleep(0.05)
        if waiting:
            log.warning("tfdist: rank 0 left after %gs without word from rank(s) %s finishing their process group",
                        EXIT_WAIT, ", ".join(map(str, sorted(waiting))))
    except (TfdistError, OSError) as e:  # the store gone (the job is being stopped): nothing to wait for
        log.debug("torch exit: %s", e)
    finally:
        if rank == 0:
            _KEPT.clear()

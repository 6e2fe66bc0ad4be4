"""The tfdist this package runs on: the one the worker's Python imports, else the one this file is part of (a
worker whose Python has no tfdist installed still got this directory from tfdist's agent)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

try:
    import tfdist  # noqa: F401
except ImportError:  # tfdist/compat/determined_api/determined/_tfdist.py: the root is four levels up
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))))

from tfdist import envvars  # noqa: E402
from tfdist.context import DistributedContext as TfdistContext, context_from_env  # noqa: E402


def launched() -> bool:
    """This process is a worker tfdist started (else: a script run by hand, off-cluster as Determined says)."""
    return envvars.RANK in os.environ


def context() -> TfdistContext:
    """This process's place in its tfdist job, read from the environment (nothing started)."""
    return context_from_env(os.environ)


def env_json(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return default


def trial_number(job_id: str) -> int:
    """Determined's trial id is an integer (its scripts write it into checkpoints and int() it back): a tfdist
    job id is `<sequence>-<suffix>`, the sequence unique on its coordinator."""
    head = job_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0

"""The documented limits of what a job and a request may ask for, in one place (docs/security.md lists them).

Every edge checks against these: the config file and the command line in the client (cluster/shared/config.py,
cluster/client/commands_table.py), the coordinator's gRPC edge for a job spec (the same `check_config`, through
jobspec.from_pb) and for every other request field (cluster/coordinator/request_checks.py). No request makes
the coordinator do work proportional to a number in it: a number beyond these is refused before it is used.

The helpers return what is wrong ("" when nothing is), so each edge raises its own error with its own prefix.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

# ---------------------------------------------------------------- a job
MAX_SLOTS = 65_536  # slots_per_trial, and the slots one agent offers
MIN_PRIORITY, MAX_PRIORITY = -1_000_000, 1_000_000
MAX_RESTARTS = 1_000  # max_restarts
MAX_NUM_PS = 1_024  # distribution.num_ps
MAX_AGGREGATION_FREQUENCY = 1_000_000  # optimizations.aggregation_frequency
MAX_GLOBAL_BATCH_SIZE = 2 ** 31 - 1  # hyperparameters.global_batch_size
MAX_SECONDS = 7 * 24 * 3600.0  # any timeout (step_timeout, startup_timeout, daemon intervals): finite, <= 7 days
MAX_NAME_CHARS = 256  # the job's name
MAX_PATH_CHARS = 4_096  # working_dir, checkpoint_storage (PATH_MAX)
MAX_ARGS = 4_096  # entrypoint: arguments
MAX_ARG_CHARS = 65_536  # entrypoint: one argument (Linux refuses one over 128 KiB: MAX_ARG_STRLEN)
MAX_ENTRYPOINT_CHARS = 262_144  # entrypoint: every argument together
MAX_ENV_VARS = 1_024  # environment.variables: how many
MAX_ENV_NAME_CHARS = 256
MAX_ENV_VALUE_CHARS = 65_536
MAX_ENV_CHARS = 262_144  # environment.variables: names and values together
MAX_HPARAM_DEPTH = 32  # hyperparameters: nesting of mappings and lists
MAX_HPARAM_NODES = 10_000  # hyperparameters: keys, values and list items, aliases expanded
MAX_HPARAM_CHARS = 65_536  # hyperparameters: their JSON (they reach every worker as one environment variable)
MAX_USER_DATA_CHARS = 32_768  # Determined's `data`: its JSON (TFDIST_USER_DATA)
MAX_DETERMINED_CHARS = 16_384  # Determined's keys tfdist keeps as written: their JSON
# TFDIST_EXPERIMENT_CONFIG (the Determined view: hyperparameters, data and the rest): Linux takes at most 128 KiB
# in one environment string (MAX_ARG_STRLEN)
MAX_EXPERIMENT_VIEW_CHARS = 126_976
MAX_SUBMISSION_ID_CHARS = 128
MAX_MODE_REASON_CHARS = 1_024

# ---------------------------------------------------------------- the config file
MAX_CONFIG_BYTES = 1 << 20  # a config file larger than 1 MiB is refused unread
MAX_YAML_DEPTH = 64  # nesting of the YAML document itself
MAX_YAML_EXPANDED = 1 << 22  # nodes plus scalar characters, every alias expanded (the alias bomb)

# ---------------------------------------------------------------- other request fields (request_checks.py)
MAX_ID_CHARS = 64  # a job id: "<seq>-<hex>", or its number alone
MAX_SEQ_DIGITS = 18  # a job's number: it fits SQLite's 64-bit INTEGER
MAX_AGENT_NAME_CHARS = 128  # a node name (the credential's name pattern)
MAX_LABEL_CHARS = 256  # a log source, a stream, a metric note, a reason, a GPU's name or uuid
MAX_MESSAGE_CHARS = 65_536  # an error text an agent reports, one last line of a failed worker
MAX_ITEMS = 10_000  # items of one repeated field (log lines, metrics, running tasks, ranks, ports...)
MAX_RANK = 2 * MAX_SLOTS + MAX_NUM_PS + 1  # a rank: slots, plus a ps job's servers and evaluator
MAX_GPUS = 1_024  # GPUs one node reports
MAX_SEQ = 2 ** 62  # a log or metric sequence number (first_seq + items stays within SQLite's 64-bit INTEGER)
MAX_WAIT_MS = 600_000  # a long poll's wait_ms (the server holds a call shorter than this anyway)
MAX_PAGE_TOKEN_CHARS = 256


def text_problem(value: Any, max_chars: int, *, empty: bool = True) -> str:
    """What is wrong with a string that may become a name, an argument or an environment value."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not empty and not value.strip():
        return "is empty"
    if "\x00" in value:
        return "contains a NUL byte (\\0), which no argument, path or environment value can hold"
    if len(value) > max_chars:
        return f"is {len(value):,} characters long; the limit is {max_chars:,}"
    return ""


def int_problem(value: Any, low: int, high: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, got {type(value).__name__}"
    if not low <= value <= high:
        return f"must be between {low:,} and {high:,}, got {_short(value)}"
    return ""


def seconds_problem(value: Any, *, zero: bool = True, high: float = MAX_SECONDS) -> str:
    """A number of seconds: finite, >= 0 (> 0 unless `zero`), at most `high`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number of seconds, got {type(value).__name__}"
    if not math.isfinite(value):
        return f"expected a finite number of seconds, got {value}"
    if value < 0 or (value == 0 and not zero):
        return f"must be {'at least 0' if zero else 'positive'}, got {value:g}"
    if value > high:
        return f"must be at most {high:g} seconds ({high / 86400:g} days), got {value:g}"
    return ""


def tree_problem(value: Any, max_depth: int = MAX_HPARAM_DEPTH, max_nodes: int = MAX_HPARAM_NODES,
                 max_chars: int = MAX_HPARAM_CHARS) -> str:
    """What is wrong with a nested value (mappings, lists, scalars: hyperparameters): deeper than `max_depth`,
    more than `max_nodes` keys, values and items, or more than `max_chars` characters in its strings and keys.
    Iterative, and it stops at the first bound passed: a shared or recursive structure (YAML aliases) costs
    no more than the bounds, however large it would be written out."""
    stack = [(value, 0)]
    nodes = chars = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return f"have more than {max_nodes:,} keys, values and items"
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            chars += item.bit_length() // 3 + 1  # about its decimal digits, without converting a huge one
        if chars > max_chars:
            return f"hold more than {max_chars:,} characters"
        if isinstance(item, (Mapping, list, tuple, set, frozenset)):
            if depth >= max_depth:
                return f"are nested deeper than {max_depth} levels"
            if len(item) > max_nodes - nodes:
                return f"have more than {max_nodes:,} keys, values and items"
            children = [x for pair in item.items() for x in pair] if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    return ""


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"

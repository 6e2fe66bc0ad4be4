"""Entry point of Bazel's py_test targets: runs pytest on the files given as arguments, or on this shard's
share of them when Bazel shards the target (TEST_TOTAL_SHARDS, TEST_SHARD_INDEX: every n-th file)."""

import os
import sys

import pytest


def shard(files: list[str], env=os.environ) -> list[str]:
    """This shard's files (all of them when the target is not sharded), and tells Bazel the protocol is
    understood (TEST_SHARD_STATUS_FILE)."""
    total = int(env.get("TEST_TOTAL_SHARDS", "0") or 0)
    if total <= 1:
        return files
    if env.get("TEST_SHARD_STATUS_FILE"):
        open(env["TEST_SHARD_STATUS_FILE"], "a").close()
    index = int(env["TEST_SHARD_INDEX"])
    return sorted(files)[index::total]


if __name__ == "__main__":
    # Run from the runfiles tree so `tests.conftest` and the packages import as in the repo.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    sys.path.insert(0, root)
    # Only the plugin the unit tests use: autoloading every installed one (hypothesis' and anyio's, which import
    # hypothesis, trio and more) cost 0.9 of 1.4 s per target, about 45 s of the unit tier on 2 cores.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    files = [a for a in sys.argv[1:] if not a.startswith("-")]
    options = [a for a in sys.argv[1:] if a.startswith("-")]
    mine = shard(files)
    if not mine:
        sys.exit(0)
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "pytest_timeout", *options, *mine]))

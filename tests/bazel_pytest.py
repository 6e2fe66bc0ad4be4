"""Entry point of Bazel's py_test targets: runs pytest on the file given as argument."""

import os
import sys

import pytest

if __name__ == "__main__":
    # Run from the runfiles tree so `tests.conftest` and the packages import as in the repo.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    sys.path.insert(0, root)
    # Only the plugin the unit tests use: autoloading every installed one (hypothesis' and anyio's, which import
    # hypothesis, trio and more) cost 0.9 of 1.4 s per target, about 45 s of the unit tier on 2 cores.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "pytest_timeout", *sys.argv[1:]]))

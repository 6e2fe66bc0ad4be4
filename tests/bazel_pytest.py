"""Entry point of Bazel's py_test targets: runs pytest on the file given as argument."""

import os
import sys

import pytest

if __name__ == "__main__":
    # Run from the runfiles tree so `tests.conftest` and the packages import as in the repo.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    sys.path.insert(0, root)
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))

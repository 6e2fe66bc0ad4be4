"""A protocol held by mypy in tests: a registry of implementations must type-check clean, and a module of broken
ones must not (which proves the check can fail). Used for the control plane's planners and the worker modes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def registry_errors(package: str, broken_source: str, tmp_path) -> list[str]:
    """Runs mypy over `package` (a path under the repository) and a module holding `broken_source`; asserts
    the package is clean and mypy failed, and returns the broken module's error messages."""
    if importlib.util.find_spec("mypy") is None:
        raise AssertionError("mypy is not installed: it comes with the test extra (pip install -e '.[test]')")
    broken = tmp_path / "broken.py"
    broken.write_text(broken_source)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / "mypy-cache"), package, str(broken)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    ours = [line for line in errors if not line.startswith(str(broken))]
    assert not ours, f"mypy found errors in {package}:\n" + "\n".join(ours)
    assert result.returncode == 1, result.stdout + result.stderr
    return [line.split(": error: ")[1] for line in errors]

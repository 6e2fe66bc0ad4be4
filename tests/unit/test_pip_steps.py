"""tools/pip_steps.py, what `make demo` shows while it installs: a few step lines instead of pip's silence
(or its fifty lines), and all of pip's output when it fails."""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(120)
SCRIPT = os.path.join(REPO, "tools", "pip_steps.py")
spec = importlib.util.spec_from_file_location("pip_steps", SCRIPT)
pip_steps = sys.modules["pip_steps"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
spec.loader.exec_module(pip_steps)

# What pip 23.2 printed for `pip install -e '.[examples]'` (shortened).
PIP_OUTPUT = """\
Obtaining file:///tmp/demo
Processing /opt/pypi/files/pyyaml-6.0.3-cp311-cp311-manylinux2014_x86_64.whl (from tfdist==0.1.0)
Collecting absl-py>=2.0 (from tfdist==0.1.0)
  Downloading absl_py-2.5.1-py3-none-any.whl (137 kB)
WARNING: Location 'file:///opt/pypi-more/simple/grpcio/' is ignored: it is neither a file nor a directory.
Requirement already satisfied: setuptools in /tmp/v2/lib/python3.11/site-packages (65.5.0)
Successfully built tfdist
Installing collected packages: namex, absl-py, pyyaml, tfdist, keras, tensorflow-cpu
Successfully installed absl-py-2.5.1 keras-3.15.1 namex-0.1.0 pyyaml-6.0.3 tensorflow-cpu-2.21.0 tfdist-0.1.0
"""


def test_pips_lines_become_a_few_steps():
    steps = pip_steps.Steps("tfdist[examples]")
    shown = [line for line in (steps.feed(text, 12.0) for text in PIP_OUTPUT.splitlines(keepends=True)) if line]
    assert shown == ["tfdist[examples]: installing 6 packages (3 others and tfdist, keras, tensorflow-cpu), "
                     "12 s so far"]
    assert steps.finished(30.4) == "tfdist[examples]: installed 6 packages in 30 s"
    quiet = pip_steps.Steps("x")
    quiet.feed(PIP_OUTPUT.splitlines()[1], 3.0)
    assert quiet.still(11) == "x: still resolving (1 requirements found, 11 s)"
    quiet.feed(PIP_OUTPUT.splitlines()[7], 12.0)
    assert quiet.still(22) == "x: still installing (22 s)"


def test_a_failing_pip_shows_all_it_said_and_its_exit_code(tmp_path):
    run = subprocess.run([sys.executable, SCRIPT, "demo", "--", "--no-index", "--find-links", str(tmp_path),
                          "--no-deps", "no-such-package-tfdist-test==1.0"], capture_output=True, text=True, timeout=100)
    assert run.returncode == 1, run
    assert run.stdout.splitlines()[0].startswith("demo: pip install --no-index")
    assert "ERROR: Could not find a version that satisfies the requirement no-such-package-tfdist-test" in run.stderr
    assert run.stderr.splitlines()[-1] == "demo: pip failed (exit 1); its output is above"

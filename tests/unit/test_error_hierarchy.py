"""One error hierarchy, read from the code: every exception class defined in `cluster/` or `tfdist/` derives
from `tfdist.errors.TfdistError` and carries a valid `grpc_code` (a `grpc.StatusCode` name) and an int
`exit_code`, so the CLI and the servicers map it to a code instead of INTERNAL or a traceback; and no code in
`cluster/` raises a bare builtin (ValueError, RuntimeError, ...) that would reach a user unmapped.

The modules are imported in a child process with TensorFlow, Keras and Horovod blocked (the control plane must
not need them; the worker-side modules that do are read from their source instead), so the result does not
depend on what other tests loaded.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import pathlib
import subprocess
import sys

import grpc
import pytest

import tfdist.errors

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("cluster", "tfdist")
GENERATED = "cluster.shared.protos.tfdist.v1"  # protoc's output (and its package)
HEAVY = ("tensorflow", "keras", "tf_keras", "horovod")
NOT_IMPORTED = {  # module -> why it is read from its source instead of imported
    "tfdist.compat.bootstrap.sitecustomize": "importing it installs import hooks in the importing process",
}
BUILTIN_RAISES = ("ValueError", "RuntimeError", "KeyError", "TypeError", "Exception")
ALLOWED_BUILTIN_RAISES: dict[tuple[str, str], str] = {
    # ("cluster/path.py", "ValueError"): "why a builtin is right here (e.g. a protocol that requires it)",
    ("cluster/coordinator/scheduler.py", "KeyError"): "BlockedReasons is a Mapping: its __getitem__ says a job "
                                                      "does not wait with KeyError, as get() and ChainMap expect",
    ("cluster/coordinator/run_state.py", "KeyError"): "WaitingReasons is a Mapping: its __getitem__ says a job does "
                                                      "not wait with KeyError, as get() expects",
}


def _modules() -> dict[str, pathlib.Path]:
    """Every module of the packages, by dotted name (a file in a folder without __init__.py is in no package)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if any(not (folder / "__init__.py").exists() for folder in path.parents if REPO in folder.parents):
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if name != GENERATED and not name.startswith(GENERATED + "."):
                found[name] = path
    return found


MODULES = _modules()


# ---------------------------------------------------------------- run in the child process

class _BlockHeavy:
    """A meta-path finder that refuses TensorFlow, Keras and Horovod."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ModuleNotFoundError(f"{name} is blocked: the control plane must not need it", name=name)
        return None


def _describe(cls: type, module: str, resolved_by: str) -> dict:
    return {"class": f"{module}.{cls.__qualname__}", "bases": [f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__],
            "is_tfdist": issubclass(cls, tfdist.errors.TfdistError), "grpc_code": getattr(cls, "grpc_code", None),
            "exit_code": getattr(cls, "exit_code", None), "resolved_by": resolved_by}


def _imported_errors(module) -> list[dict]:
    return [_describe(value, module.__name__, "import") for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__]


def _source_errors(name: str, path: pathlib.Path) -> list[dict]:
    """The exception classes of a module that is not imported: each class's bases looked up among the
    builtins and the names the module imports from modules that do import; its own `exit_code = ...` and
    `grpc_code = ...` lines override what it inherits."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = dict(vars(builtins))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            try:
                source = importlib.import_module(node.module)
            except ImportError:
                continue
            for alias in node.names:
                if hasattr(source, alias.name):
                    names[alias.asname or alias.name] = getattr(source, alias.name)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [names.get(b.id) for b in node.bases if isinstance(b, ast.Name)]
        bases = [b for b in bases if isinstance(b, type) and issubclass(b, BaseException)]
        if not bases:
            continue
        own = {t.id: ast.literal_eval(s.value) for s in node.body if isinstance(s, ast.Assign)
               for t in s.targets if isinstance(t, ast.Name) and t.id in ("grpc_code", "exit_code")}
        cls = type(node.name, tuple(bases), {**own, "__module__": name, "__qualname__": node.name})
        found.append(_describe(cls, name, "source"))
    return found


def survey() -> dict:
    """Every module's exception classes; for the modules that could not be imported, why."""
    sys.meta_path.insert(0, _BlockHeavy())
    result = {"errors": [], "from_source": {}, "failed": {}}
    for name, path in MODULES.items():
        if name in NOT_IMPORTED:
            result["from_source"][name] = NOT_IMPORTED[name]
            result["errors"] += _source_errors(name, path)
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in HEAVY:
                result["failed"][name] = f"{type(e).__name__}: {e}"
                continue
            result["from_source"][name] = f"needs {e.name}"
            result["errors"] += _source_errors(name, path)
            continue
        except Exception as e:  # noqa: BLE001 - reported by the test, the survey goes on
            result["failed"][name] = f"{type(e).__name__}: {e}"
            continue
        result["errors"] += _imported_errors(module)
    result["heavy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    return result


# ---------------------------------------------------------------- the tests

@pytest.fixture(scope="module")
def surveyed() -> dict:
    code = "import json, tests.unit.test_error_hierarchy as t; print(json.dumps(t.survey()))"
    child = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_the_survey_saw_the_modules_without_tensorflow(surveyed):
    assert surveyed["failed"] == {}
    assert surveyed["heavy_loaded"] == []
    assert "cluster.client.cli" in MODULES and "cluster.shared.rpc" in MODULES
    assert not any(name.startswith("cluster.") for name in surveyed["from_source"]), surveyed["from_source"]
    assert any(e["class"] == "cluster.shared.config_values.ConfigError" for e in surveyed["errors"])


def test_every_error_derives_from_tfdist_error(surveyed):
    outside = [f"{e['class']} (bases: {', '.join(e['bases'][1:])})" for e in surveyed["errors"] if not e["is_tfdist"]]
    assert not outside, "errors outside tfdist.errors.TfdistError (derive from UserError, NotFoundError, ...):\n  " + \
        "\n  ".join(outside)


def test_every_error_has_a_grpc_code_and_an_exit_code(surveyed):
    bad = [f"{e['class']}: grpc_code={e['grpc_code']!r} exit_code={e['exit_code']!r}" for e in surveyed["errors"]
           if e["is_tfdist"] and not (e["grpc_code"] in grpc.StatusCode.__members__ and e["grpc_code"] != "OK"
                                      and type(e["exit_code"]) is int and 1 <= e["exit_code"] <= 127)]
    assert not bad, "invalid codes:\n  " + "\n  ".join(bad)


def _builtin_raises(path: pathlib.Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in BUILTIN_RAISES:
                found.append((node.lineno, raised.id))
    return found


def test_the_control_plane_raises_no_bare_builtin_errors():
    flagged = []
    for name, path in MODULES.items():
        relative = str(path.relative_to(REPO))
        if name.startswith("cluster."):
            flagged += [f"{relative}:{line}: raise {error}" for line, error in _builtin_raises(path)
                        if (relative, error) not in ALLOWED_BUILTIN_RAISES]
    assert not flagged, "raise an error of tfdist.errors (it carries the exit and gRPC codes) instead of:\n  " + \
        "\n  ".join(flagged)


def test_the_allow_list_is_still_needed():
    for (relative, error), reason in ALLOWED_BUILTIN_RAISES.items():
        assert reason and any(e == error for _, e in _builtin_raises(REPO / relative)), (relative, error)


def test_the_documented_table_is_the_hierarchy():
    documented = {}
    for line in tfdist.errors.__doc__.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1].isdigit() and hasattr(tfdist.errors, fields[0]):
            documented[fields[0]] = (int(fields[1]), fields[2])
    defined = {name: (value.exit_code, value.grpc_code) for name, value in vars(tfdist.errors).items()
               if isinstance(value, type) and issubclass(value, tfdist.errors.TfdistError)}
    assert documented == defined


def test_the_errors_module_imports_nothing():
    tree = ast.parse(pathlib.Path(tfdist.errors.__file__).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]

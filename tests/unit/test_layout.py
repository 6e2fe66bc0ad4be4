"""The shape of the house, read from the source: no import loops in `tfdist/` or `cluster/` (imports inside
functions count: they are how loops hide), and imports run from a side of `cluster/` to `shared/` only.

Sides: `client/` (the user's terminal), `coordinator/` (the daemon), `agent/` (each node), `slurm/` (inside
an allocation); `shared/` is what all of them use. A side starts another in-process only through its entry
point (`cluster.coordinator.daemon`, `cluster.agent.daemon`); everything else crosses over gRPC. Engines
(`engines/`, where a job's processes run) use the seam's protocol and a machine's executor (ENGINE_SEAM) and
are built by the client; the coordinator's job logic never imports them.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("tfdist", "cluster")
GENERATED = "cluster.shared.protos.tfdist.v1."

ENTRY_POINTS = {"cluster.coordinator.daemon", "cluster.agent.daemon"}
# What an engine (cluster/engines/) may use of the other sides: the contract (cluster/coordinator/engine.py: the
# Engine protocol, its host and the events an engine reports; nothing of the job side's tables) and a
# machine's executor.
ENGINE_SEAM = {"cluster.coordinator.engine", "cluster.agent.node_runs", "cluster.agent.leftovers"}
# side -> the sides (and entry points) its modules may import
ALLOWED = {
    "tfdist": {"tfdist"},
    "cluster": {"cluster"},  # the package's own __init__
    "shared": {"shared", "tfdist"},
    "coordinator": {"coordinator", "shared", "tfdist"},
    "agent": {"agent", "shared", "tfdist"},
    "slurm": {"slurm", "shared", "tfdist", "engines", *ENTRY_POINTS},
    "client": {"client", "shared", "tfdist", "slurm", "engines", *ENTRY_POINTS},
    "engines": {"engines", "shared", "tfdist", *ENGINE_SEAM},
}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not name.startswith(GENERATED) and "bootstrap" not in parts:
                found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module a dotted import name loads (the longest prefix that is one of ours)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: pathlib.Path) -> set[str]:
    """Every module of ours that `module` imports, anywhere in its body (under `if TYPE_CHECKING:` too:
    a loop of annotations is a loop a reader follows)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _side(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "tfdist":
        return "tfdist"
    return parts[1] if len(parts) > 1 else "cluster"


def test_the_reader_finds_the_house():
    """Guards the guard: a reader that found nothing would pass every check below."""
    assert {"cluster.coordinator.core", "cluster.agent.agent", "cluster.shared.config", "tfdist.context"} <= set(GRAPH)
    assert "cluster.shared.config" in GRAPH["cluster.coordinator.core"] or any(
        "cluster.shared" in m for m in GRAPH["cluster.coordinator.core"])
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_loops(package):
    loops = [c for c in _cycles(GRAPH) if c[0].split(".")[0] == package]
    assert not loops, "import loops (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_every_module_is_in_a_side():
    loose = [m for m in GRAPH if m.startswith("cluster.") and _side(m) not in ALLOWED]
    assert not loose, f"modules outside client/, coordinator/, agent/, slurm/ and shared/: {loose}"


def test_imports_run_from_a_side_to_shared():
    crossings = []
    for module, targets in sorted(GRAPH.items()):
        allowed = ALLOWED[_side(module)]
        for target in sorted(targets):
            if target in allowed or _side(target) in allowed or target == "cluster":
                continue
            crossings.append(f"{module} imports {target}")
    assert not crossings, "imports across sides (go through shared/, gRPC or an entry point):\n" + "\n".join(crossings)


MAX_FILE_LINES = 400
MAX_CLASS_LINES = 300


def test_rooms_stay_small():
    """A file past a few hundred lines, or a class past ~300, does two jobs: split it."""
    large = []
    for module, path in sorted(MODULES.items()):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_FILE_LINES:
            large.append(f"{path.relative_to(REPO)}: {lines} lines (at most {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                large.append(f"{path.relative_to(REPO)}: class {node.name} has {node.end_lineno - node.lineno + 1} "
                             f"lines (at most {MAX_CLASS_LINES})")
    assert not large, "\n".join(large)


def test_no_engine_imports_another_engine():
    """An engine is one package (cluster/engines/NAME/) and one line in the registry (cluster/engines/__init__.py):
    it may import the registry and its own modules, never another engine's."""
    assert "cluster.coordinator.engine" in GRAPH["cluster.engines.kubernetes.engine"]  # the reader sees engines
    crossings = []
    for module, targets in sorted(GRAPH.items()):
        parts = module.split(".")
        if parts[:2] != ["cluster", "engines"] or len(parts) < 3:
            continue
        for target in sorted(targets):
            other = target.split(".")
            if other[:2] == ["cluster", "engines"] and len(other) >= 3 and other[2] != parts[2]:
                crossings.append(f"{module} imports {target}")
    assert not crossings, "an engine imports another engine:\n" + "\n".join(crossings)

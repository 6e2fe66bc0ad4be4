"""The worker API the docs show, against tfdist's source read with ast (nothing imported: the callbacks
would bring TensorFlow): `tfdist.NAME(...)` calls and `from tfdist.X import Y` name something that
exists and pass only keywords it takes, `ctx.NAME` is an attribute of DistributedContext, and a
```python block parses."""

from __future__ import annotations

import ast
import functools
import re

from tests.doc_snippets import REPO, Snippet

_REFERENCE = re.compile(r"(?<![\w.])(tfdist(?:\.\w+)+|ctx\.\w+)")


@functools.lru_cache(maxsize=None)
def _module(dotted: str) -> ast.Module | None:
    base = REPO / dotted.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return ast.parse(path.read_text(encoding="utf-8"))
    return None


def _definition(module: str, name: str) -> ast.AST | None | bool:
    """`name` at the top of `module`: its def or class (imports followed), True for another kind of
    name (a constant), None when it is not there."""
    tree = _module(module)
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _definition(node.module, alias.name) if node.module.startswith("tfdist") else True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets) and isinstance(node.value, ast.Dict):
            lazy = {k.value: v.value for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}  # a package's PEP 562 exports
            if name in lazy:
                return _definition(lazy[name], name)
    return None


def resolve(dotted: str) -> ast.AST | None | bool:
    """tfdist.a.b.C -> C's def or class (the modules walked, then one name; what follows a name, a method,
    is not followed); True for a module or a constant; None when something is not there."""
    parts, module, i = dotted.split("."), "tfdist", 1
    while i < len(parts) and _module(f"{module}.{parts[i]}") is not None:
        module, i = f"{module}.{parts[i]}", i + 1
    return True if i == len(parts) else _definition(module, parts[i])


def _parameters(definition: ast.AST) -> set[str] | None:
    """The keyword names a def or a class's __init__ takes; None when any is accepted (**kwargs, no
    __init__ of its own)."""
    if isinstance(definition, ast.ClassDef):
        definition = next((n for n in definition.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                          None)
    if not isinstance(definition, ast.FunctionDef) or definition.args.kwarg:
        return None
    args = definition.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"}


@functools.lru_cache(maxsize=None)
def context_attributes() -> frozenset[str]:
    context = _definition("tfdist.context", "DistributedContext")
    assert isinstance(context, ast.ClassDef)
    return frozenset(n.name if isinstance(n, ast.FunctionDef) else n.target.id for n in context.body
                     if isinstance(n, ast.FunctionDef) or (isinstance(n, ast.AnnAssign)
                                                          and isinstance(n.target, ast.Name)))


def api_problems(snippet: Snippet) -> list[str]:
    kind = (snippet.info or "").split()[:1]
    problems = []
    if kind == ["python"]:
        try:
            tree = ast.parse(snippet.text)
        except SyntaxError as e:
            return [f"{snippet.file}:{snippet.line + (e.lineno or 1) - 1}: this python block does not parse: {e.msg}"]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfdist"):
                problems += [f"{snippet.where}: `from {node.module} import {a.name}`: no such name in tfdist"
                             for a in node.names if resolve(f"{node.module}.{a.name}") is None]
    elif snippet.info is not None:
        return []
    for match in _REFERENCE.finditer(snippet.text):
        name, rest = match.group(1), snippet.text[match.end():]
        if name.startswith("ctx."):
            if name[4:] not in context_attributes():
                problems.append(f"{snippet.where}: `{name}`: DistributedContext (tfdist/context.py) has no such "
                                "attribute")
            continue
        is_call, first = rest.startswith("("), name.split(".")[1]
        if not is_call and _module(f"tfdist.{first}") is None and _definition("tfdist", first) is None:
            continue  # not tfdist's Python API (the wire's package `tfdist.v1`)
        definition = resolve(name)
        if definition is None:
            problems.append(f"{snippet.where}: `{name}`: no such name in tfdist's source")
        elif is_call:
            problems += _keyword_problems(snippet, name, definition, rest)
    return problems


def _keyword_problems(snippet: Snippet, name: str, definition: ast.AST | bool, rest: str) -> list[str]:
    end = rest.find(")")
    try:
        call = ast.parse(f"f{rest[:end + 1]}", mode="eval").body if end > 0 else None
    except SyntaxError:  # `tfdist.download(url_or_fn, scope="rank"|"node")`: notation, not Python
        call = None
    taken = _parameters(definition) if isinstance(definition, ast.AST) else None
    if not isinstance(call, ast.Call) or taken is None:
        return []
    return [f"{snippet.where}: `{name}(...)` has no parameter {k.arg!r} (it takes {', '.join(sorted(taken))})"
            for k in call.keywords if k.arg and k.arg not in taken]

"""The layer rule of the README's "Layout" (issue 20), checked on the source with `ast` (nothing is imported).

Folders are layers. A module imports only from its own folder or from a layer below it, function-level
imports included (STYLE 13: a lazy import that dodges a cycle is still a cycle). Three tests:

* no upward import, and none between siblings (ncu/ and nsys/ know nothing of each other);
* no import cycle (arch_check.py's idea, kept in the project);
* no public name reachable through a shim: a name is imported from the module that defines it, or from a
  package's own face (``nsightwrap``, or a subpackage's ``__init__`` for what its own modules define).

`if TYPE_CHECKING:` imports may point upward, for annotations only: they never run, so they add no
dependency, no import order and no cycle; they let the lowest layer name what it carries (errors.py's
AttemptHung(attempt: Attempt), STYLE 8) where the alternative is `object`, or moving ncu's record below
the watch loop. "For annotations only" is checked: such a name used anywhere else fails.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

from helpers import parsed

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nsightwrap"

#: Lowest first. A module imports its own folder (or top-level module) and the ranks before its own; names in
#: one rank are siblings and import nothing of one another. A new top-level module or folder must be placed here.
LAYERS: list[tuple[str, ...]] = [
    ("secrets", "status", "version"),  # import nothing of the package
    ("errors",),  # its messages are masked: secrets
    ("paths",),  # raises errors
    ("watch",),  # process watching; knows no ncu
    ("ncu", "nsys"),  # the two profilers, each on the watch loop; siblings
    ("reports",),
    ("store",),
    ("calibrate",),
    ("fallback",),
    ("diagnose",),  # triage: compute-sanitizer and repeated plain runs (issue 21): uses fallback's walk
    ("call",),
    ("cli",),
    ("__init__", "__main__"),  # the top: the public names, `python -m nsightwrap`
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}

#: Modules that hand on names they do not define, left out of the shim test on purpose; each says why.
#: (module, name): why. Empty: every name is imported from its home.
ALLOWED_SHIMS: dict[tuple[str, str], str] = {}

#: Where other code imports package names from; each is read for the shim test.
IMPORTERS = ("nsightwrap", "tests", "benchmarks", "examples", "devtools")


class Import(NamedTuple):
    source: str  # the importing module
    target: str  # the imported module (a submodule when `from pkg import submodule`)
    name: Optional[str]  # the name taken from it (None for `import x`)
    line: int
    type_checking: bool  # inside `if TYPE_CHECKING:`


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _tree(path: Path) -> ast.Module:
    return parsed(path)


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path) -> Iterator[Import]:
    """Every import of `path` (module `name`): module level, in functions and classes, under TYPE_CHECKING."""
    modules = _modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, type_checking: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                for stmt in child.body:
                    yield from walk_one(stmt, True)
                for stmt in child.orelse:
                    yield from walk_one(stmt, type_checking)
            else:
                yield from walk_one(child, type_checking)

    def walk_one(node: ast.AST, type_checking: bool) -> Iterator[Import]:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield Import(name, sub if sub in modules else target, alias.name, node.lineno, type_checking)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, None, node.lineno, type_checking)
        yield from walk(node, type_checking)

    yield from walk(_tree(path), False)


@functools.cache
def _package_imports() -> tuple[Import, ...]:
    """Imports between modules of the package."""
    modules = _modules()
    return tuple(i for name, path in modules.items() for i in _imports(name, path) if i.target in modules)


def _part(module: str) -> str:
    """The layer key of a module: its top-level folder or module under nsightwrap/ ("__init__" for the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _where(i: Import) -> str:
    return f"{_modules()[i.source].relative_to(ROOT)}:{i.line}"


def test_every_module_has_a_layer():
    unplaced = sorted({_part(m) for m in _modules()} - set(RANK))
    assert not unplaced, f"place these in LAYERS (what they import decides where): {unplaced}"


def test_no_module_imports_a_layer_above_it_or_a_sibling():
    wrong = []
    for i in _package_imports():
        if i.type_checking:
            continue  # annotations only: test_type_checking_imports_are_annotations_only
        mine, theirs = _part(i.source), _part(i.target)
        if mine == theirs or RANK[theirs] < RANK[mine]:
            continue
        how = "above it" if RANK[theirs] > RANK[mine] else "beside it (siblings)"
        wrong.append(f"{i.source} -> {i.target} (layer {mine} imports layer {theirs} {how}; {_where(i)})")
    assert not wrong, "imports that break the layer rule (README, Layout):\n  " + "\n  ".join(sorted(wrong))


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (parameters, returns, annotated assignments)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def test_type_checking_imports_are_annotations_only():
    """A name imported upward under TYPE_CHECKING is used in annotations only (it does not exist at run time)."""
    wrong = []
    for name, path in _modules().items():
        upward = {i.name for i in _imports(name, path) if i.type_checking and i.name and i.target in _modules()
                  and _part(i.target) != _part(name) and RANK[_part(i.target)] >= RANK[_part(name)]}
        if not upward:
            continue
        tree = _tree(path)
        skip = _annotation_nodes(tree) | {id(n) for node in tree.body if _is_type_checking(node)
                                          for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in upward and id(node) not in skip:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {node.id} at run time")
    assert not wrong, "imported upward under TYPE_CHECKING, so for annotations only:\n  " + "\n  ".join(wrong)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iterative (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def test_no_import_cycle():
    """As /work/shared/tools/arch_check.py: runtime imports (function-level ones too, TYPE_CHECKING ones not);
    a module importing its own package's __init__ (the package's face) is no edge."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for i in _package_imports():
        own_package = modules[i.target].name == "__init__.py" and i.source.startswith(i.target + ".")
        if not i.type_checking and i.target != i.source and not own_package:
            graph[i.source].add(i.target)
    cycles = [c for c in _strongly_connected(graph) if sum(modules[m].name != "__init__.py" for m in c) > 1]
    assert not cycles, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in cycles)


def _defined(tree: ast.Module) -> set[str]:
    """Names a module binds itself at module level (not by importing them)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
    visit(tree.body)
    return names


@functools.cache
def _homes() -> dict[str, tuple[set[str], set[str]]]:
    """module -> (names it defines, names it may hand on: a package's face for its own modules' names)."""
    modules = _modules()
    homes = {}
    for name, path in modules.items():
        faced: set[str] = set()
        if path.name == "__init__.py":
            faced = {i.name for i in _imports(name, path) if i.name and i.target.startswith(name + ".")
                     and i.target in modules}
        homes[name] = (_defined(_tree(path)), faced)
    return homes


def _handed_on(module: str, name: str) -> bool:
    """`name` taken from `module`, which does not define it: a shim, unless module is a face for it."""
    if module == "nsightwrap" or (module, name) in ALLOWED_SHIMS or f"{module}.{name}" in _modules():
        return False
    defined, faced = _homes()[module]
    return name not in defined and name not in faced


def test_all_lists_only_a_modules_own_names():
    """__all__ of a module (but nsightwrap's, the public face) lists what it defines, or for a package what its
    own modules define: not a name of another module handed on."""
    wrong = []
    for name, path in _modules().items():
        if name == "nsightwrap":
            continue
        for node in _tree(path).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                for entry in ast.literal_eval(node.value):
                    if _handed_on(name, entry):
                        wrong.append(f"{name}.__all__ lists {entry}, defined elsewhere")
    assert not wrong, "re-exports (import each from its home instead):\n  " + "\n  ".join(wrong)


#: `from nsightwrap.X import a, b` inside a string: code run in a child (`python -c`, a driver script, a shell step).
_IMPORT_IN_TEXT = re.compile(r"from (nsightwrap[\w.]*) import ([\w ,]+)")


def _imports_of(path: Path) -> Iterator[tuple[int, Optional[str], list[str]]]:
    """(line, module, names) of every `from nsightwrap... import` of a file: its code, and the code in its
    strings (a child's source, found by pattern); a shell script's text by pattern only."""
    if path.suffix == ".py":
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                yield node.lineno, node.module, [a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "nsightwrap" in node.value:
                for m in _IMPORT_IN_TEXT.finditer(node.value):
                    yield node.lineno, m.group(1), [n.split()[0] for n in m.group(2).split(",") if n.strip()]
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _IMPORT_IN_TEXT.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, m.group(1), [n.split()[0] for n in m.group(2).split(",")
                                                                  if n.strip()]


def test_no_name_is_imported_through_a_shim():
    """Every `from nsightwrap.<module> import name` in the package, tests, benchmarks, examples and devtools (code run
    in a child, in strings, included) takes `name` from the module that defines it, or from a face (nsightwrap,
    or a package for its own modules' names); and names a module that exists."""
    modules = _modules()
    wrong = []
    for folder in IMPORTERS:
        for path in sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh")):
            where = path.relative_to(ROOT)
            for line, module, names in _imports_of(path):
                if module not in modules:
                    if module and module.split(".")[0] == "nsightwrap":
                        wrong.append(f"{where}:{line} imports {module}, which is no module")
                    continue
                wrong.extend(f"{where}:{line} takes {name} from {module}" for name in names
                             if _handed_on(module, name))
    assert not wrong, "names imported through a module that only hands them on:\n  " + "\n  ".join(wrong)


def test_lazy_public_names_point_at_their_homes():
    """nsightwrap._LAZY (name -> module, loaded on first use) names the home of each name, or its package's face."""
    tree = _tree(PACKAGE / "__init__.py")
    lazy = next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in n.targets))
    wrong = [f"{name}: nsightwrap.{module}" for name, module in sorted(lazy.items())
             if _handed_on(f"nsightwrap.{module}", name)]
    assert not wrong, "_LAZY entries that go through a shim:\n  " + "\n  ".join(wrong)

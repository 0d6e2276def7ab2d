"""The public API (nsightwrap.__all__) is typed: every parameter and return of its functions and methods."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import nsightwrap

#: Dunder methods that are part of what a public class offers.
PUBLIC_DUNDERS = {"__init__", "__call__", "__enter__", "__exit__", "__or__"}


def unannotated(qualname: str, fn) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin
        return []
    missing = [f"{qualname}({p})" for p, param in sig.parameters.items()
               if p not in ("self", "cls") and param.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty and not qualname.endswith("__init__"):
        missing.append(f"{qualname} -> ?")
    return missing


def methods(cls):
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in PUBLIC_DUNDERS:
            continue
        if dataclasses.is_dataclass(cls) and name == "__init__":
            continue  # generated from the annotated fields
        fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if inspect.isfunction(fn):
            yield f"{cls.__name__}.{name}", fn


def test_public_api_is_annotated():
    missing = []
    for name in nsightwrap.__all__:
        obj = getattr(nsightwrap, name)
        if inspect.isclass(obj) and obj.__module__.startswith("nsightwrap"):
            for qualname, fn in methods(obj):
                missing += unannotated(qualname, fn)
        elif inspect.isfunction(obj):
            missing += unannotated(name, obj)
    assert missing == [], "add annotations to: " + ", ".join(missing)


def _top_level_imports() -> tuple[set[str], dict[str, str]]:
    """nsightwrap/__init__.py's own imports: (names imported at once, {name: module} under TYPE_CHECKING)."""
    tree = ast.parse(Path(nsightwrap.__file__).read_text())
    eager: set[str] = set()
    typing_only: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nsightwrap"):
            eager |= {a.asname or a.name for a in node.names} - {"__version__"}  # public, not in __all__
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                typing_only.update({a.asname or a.name: imp.module for a in imp.names})
    return eager, typing_only


def test_all_is_every_public_name_sorted():
    eager, _ = _top_level_imports()
    assert set(nsightwrap.__all__) == eager | set(nsightwrap._LAZY)
    assert nsightwrap.__all__ == sorted(nsightwrap.__all__) and len(set(nsightwrap.__all__)) == len(nsightwrap.__all__)


def test_type_checkers_see_every_lazy_name_where_it_loads_from():
    _, typing_only = _top_level_imports()
    assert {name: module.removeprefix("nsightwrap.") for name, module in typing_only.items()} == nsightwrap._LAZY

"""The public API (nsightwrap.__all__) is typed: every parameter and return of its functions and methods."""

from __future__ import annotations

import dataclasses
import inspect

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

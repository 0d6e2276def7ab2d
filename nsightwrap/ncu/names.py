"""The part of a kernel's name that every spelling of it shares.

ncu prints a kernel as its ``function`` name, ``demangled`` in full, or cut
short with ``...``; nsys prints it in full. A calibration (nsys) is matched to
the kernel ncu is profiling, and a hang record to the kernels like it
(nsightwrap.store.keys.normalize_kernel), on this one core of the name.
"""

from __future__ import annotations

import functools

__all__ = ["core_matches", "function_core", "same_kernel", "trim"]

ANONYMOUS_NAMESPACE = "(anonymous namespace)"
_OPEN = {"<": ">", "(": ")", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _drop_cut_mark(text: str) -> str:
    while text.endswith("..."):
        text = text[:-3].rstrip()
    return text


def trim(name: str) -> str:
    """The name without surrounding blanks or a trailing ``...`` (ncu truncates long names),
    ``(anonymous namespace)`` written ``{anon}``, so that its brackets are not taken for a parameter list."""
    return _drop_cut_mark(name.strip()).replace(ANONYMOUS_NAMESPACE, "{anon}")


def _outside_brackets(text: str) -> str:
    """`text` without its bracketed lists at top level (nested ones included; one left open by truncation
    is dropped to the end) and without stray closing brackets."""
    kept: list[str] = []
    stack: list[str] = []
    for ch in text:
        if ch in _OPEN:
            stack.append(_OPEN[ch])
            continue
        if stack:
            if ch == stack[-1]:
                stack.pop()
            continue
        if ch in _CLOSE:
            continue
        kept.append(ch)
    return "".join(kept)


@functools.lru_cache(maxsize=4096)  # pure, and asked for the same few names on every turn of a watch loop
def function_core(name: str) -> str:
    """The function's own name: `trim`, drop template arguments and parameter lists, keep the last
    blank-separated word and its last ``::`` component. ``void at::native::(anonymous
    namespace)::softmax_warp<float, 4>(float*)`` and ``softmax_warp`` both give ``softmax_warp``.
    Digits are kept (``vec_add2`` is not ``vec_add``); "" when nothing is left (``(...)``, ``...``)."""
    words = _outside_brackets(trim(name)).split()
    core = words[-1] if words else ""
    core = core.rsplit("::", 1)[-1] if "::" in core and not core.endswith("::") else core
    return _drop_cut_mark(core)  # dropping brackets may leave a cut-off mark at the end ("k<...>..." -> "k...")


def core_matches(core: str, printed: str) -> bool:
    """Whether a kernel whose function_core is `core` is the kernel ncu printed as `printed`: the same core,
    or, for a name ncu cut short with "..." ("ncclDevKernel_AllReduce_Sum_f...", 2x H200, 2026-11-26), a core
    that starts with what is left of it. A name with no core matches nothing."""
    mine = function_core(printed)
    if not mine:
        return False
    return core.startswith(mine) if printed.strip().endswith("...") else core == mine


def same_kernel(name: str, printed: str) -> bool:
    """Whether the kernel `name` (as a tracer or nsys spells it) is the kernel ncu printed as `printed`."""
    return core_matches(function_core(name), printed)

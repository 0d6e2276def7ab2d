"""Kernel names, parsed in one place: the part that every spelling of a kernel shares.

ncu prints a kernel as its ``function`` name, ``demangled`` in full, or cut
short with ``...``; nsys and the CUPTI tracer print it demangled in full. A
calibration (nsys, the tracer) is matched to the kernel ncu is profiling on
:func:`function_core`, a report's ``function`` column is derived with it, and
a hang record is matched to the kernels like it on :func:`normalize_kernel`.
No other module takes a kernel's name apart.
"""

from __future__ import annotations

import functools

__all__ = ["core_matches", "cut_short", "function_core", "normalize_kernel", "same_kernel", "trim", "uncut"]

#: What ncu appends to a name it cut short.
CUT_MARK = "..."

ANONYMOUS_NAMESPACE = "(anonymous namespace)"
_OPEN = {"<": ">", "(": ")", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _drop_cut_mark(text: str) -> str:
    while text.endswith(CUT_MARK):
        text = text[:-len(CUT_MARK)].rstrip()
    return text


def cut_short(name: str) -> bool:
    """Whether ncu cut `name` short ("ncclDevKernel_AllReduce_Sum_f...", 2x H200, 2026-11-26): only its start
    is known."""
    return name.strip().endswith(CUT_MARK)


def uncut(name: str) -> str:
    """What ncu printed of a name it cut short: without blanks around it and its ``...``."""
    return _drop_cut_mark(name.strip())


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
    return core.startswith(mine) if cut_short(printed) else core == mine


def same_kernel(name: str, printed: str) -> bool:
    """Whether the kernel `name` (as a tracer or nsys spells it) is the kernel ncu printed as `printed`."""
    return core_matches(function_core(name), printed)


def normalize_kernel(name: str) -> str:
    """The pattern of a kernel name: kernels differing only in numbers or
    template arguments, or in how ncu spelled the name, get the same one.

    Steps, in order:

    1. strip blanks and a trailing ``...`` (ncu truncates long names);
    2. ``(anonymous namespace)`` becomes ``{anon}``;
    3. drop every bracketed list at top level: template arguments ``<...>``
       and parameter lists ``(...)`` (nested brackets included; a list left
       open by truncation is dropped to the end);
    4. keep the last blank-separated word and its last ``::`` component, so
       ncu's ``function``, ``demangled`` and ``mangled``-free spellings
       (``void at::native::foo<4>(int)`` and ``foo``) agree;
    5. replace each run of digits with ``#``.

    Steps 1-4 are :func:`function_core`, on which a calibration matches the
    kernels ncu names to those nsys timed.

    So ``nvjet_sm90_tst_256x128_64x4_1...`` and ``nvjet_sm90_tst_128x128_64x4_2...``
    both give ``nvjet_sm#_tst_#x#_#x#_#``: the same GEMM kernel family with
    other tile sizes. ``vec_add`` and ``vec_add2`` also match (``vec_add#`` is
    not ``vec_add``, though). The function is idempotent, so a pattern may be
    passed wherever a name is expected. A name that would normalize to
    nothing (``(...)``, ``...``) keeps its text, with digits replaced.
    """
    if not isinstance(name, str):
        raise TypeError(f"kernel name must be a string, not {type(name).__name__}")
    core = function_core(name)  # steps 1-4
    if not core:  # nothing but brackets or dots: the text as given ("..." stays "...", so this is idempotent)
        core = " ".join(trim(name).split()) or " ".join(name.split())
    out: list[str] = []
    for ch in core:
        if ch.isdigit() and ch.isascii():
            if not out or out[-1] != "#":
                out.append("#")
        else:
            out.append(ch)
    return "".join(out)

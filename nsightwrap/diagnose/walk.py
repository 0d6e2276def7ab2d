"""Triage's ncu walk (--walk): the fallback ladder for the kernel in question, read as a WalkView.

The one place triage calls the walk (walk_ladder's signature is the fallback
layer's to change).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from nsightwrap.diagnose.verdict import WalkView
from nsightwrap.fallback.ladder import Ladder
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.status import HANG, OK
from nsightwrap.store.hangstore import HangStore

__all__ = ["run_walk", "walk_view"]


def _settings(step: Any, options: ProfileOptions) -> str:
    if step.rung.requested:
        return f"set {options.set}" if options.set else "ncu's default set"
    return step.rung.describe()


def walk_view(result: Any, options: ProfileOptions) -> WalkView:
    """The settings that hung and those that worked, per kernel ("main" steps are the whole program)."""
    hung, works = [], []
    for s in result.steps:
        a = s.attempt
        if a is None:
            continue
        if a.status == HANG:
            hung.append((a.stalled_kernel or s.job, _settings(s, options)))
        elif a.status == OK and s.job != "main":  # a kernel's own rung; "main" runs left the hung kernel out
            works.append((s.job, _settings(s, options)))
    fault = result.program_fault
    why = f"ncu walk: {fault.program_fault}" if fault is not None and isinstance(fault.program_fault, str) else (
        "ncu walk: the program hangs or fails without ncu too" if fault is not None else "")
    return WalkView(result.status, tuple(hung), tuple(works), why)


def run_walk(command: Sequence[str], kernel: Optional[str], *, set_name: str, ladder: "str | Ladder",
             config: RunConfig, store: Optional[HangStore],
             on_output: Optional[Callable[[str], None]] = None) -> tuple[WalkView, Any]:
    """Walk `ladder` over `command` (only `kernel`'s launches when named); (its view, the LadderResult)."""
    options = ProfileOptions(set=set_name, kernel=KernelFilter.from_user(kernel) if kernel else None)
    result = walk_ladder(Session.open(command, config, store=store, on_output=on_output), options, ladder)
    return walk_view(result, options), result

"""Triage's one-line verdict, from what its runs found (pure: results in, words out).

    racecheck: 12 shared-memory hazards in fused_attn (attn.cu:88); fails without ncu in 3 of 20 runs
    (cudaErrorIllegalAddress in fused_attn): not a profiler problem

    profiler-induced: wait_for_host hangs under ncu with set full; works with metrics gpu__time_duration.sum

The program is at fault when it fails or hangs without ncu in any run, or a
sanitizer found errors; profiler-induced when none of that and the ncu walk
met a hang; else nothing was found against the program (ok).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nsightwrap.diagnose.plain import FAILED, HUNG, PlainRun
from nsightwrap.ncu.names import function_core
from nsightwrap.status import OK, PROFILER_INDUCED, PROGRAM_FAULT

__all__ = ["SanitizerView", "WalkView", "judge", "short", "plain_phrase", "sanitizer_outcome", "sanitizer_phrase"]

NOT_PROFILER = "not a profiler problem"
#: sanitizer_outcome's words (the store's triage_runs.outcome).
CLEAN, FINDINGS, STALLED, SAN_ERROR = "clean", "findings", "stalled", "error"


@dataclass(frozen=True)
class SanitizerView:
    """What the verdict needs of one sanitizer run (built from nsightwrap.diagnose.sanitizer's SanitizerRun)."""

    tool: str
    outcome: str  # CLEAN, FINDINGS, STALLED, SAN_ERROR
    count: int
    kind: Optional[str] = None  # the most frequent kind of finding
    kernel: Optional[str] = None  # ... its kernel
    source: Optional[str] = None  # ... FILE:LINE, when built with line info
    summary: str = ""
    reason: str = ""  # why the run ended as it did (SanitizerRun.reason): what "could not run" says


@dataclass(frozen=True)
class WalkView:
    """What the verdict needs of the ncu walk: settings that hung and that worked, per kernel."""

    status: str
    hung: tuple[tuple[str, str], ...] = ()  # (kernel, settings)
    works: tuple[tuple[str, str], ...] = ()
    program_fault: str = ""


def short(kernel: str) -> str:
    """A kernel as people name it: its function (the tracer's full name "void ns::k<float>(float*)" is k)."""
    return function_core(kernel) or kernel


def _top(findings: Sequence[Any]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """The most frequent (kind, kernel) of a run's findings (nsightwrap.diagnose.findings.Finding), and its first
    source line (FILE:LINE, when built with line info)."""
    keys = [(f.kind, f.kernel) for f in findings]
    (kind, kernel), _ = Counter(keys).most_common(1)[0]
    where = next((f"{f.file}:{f.line}" if f.line is not None else f.file for f in findings
                  if (f.kind, f.kernel) == (kind, kernel) and f.file), None)
    return kind, kernel, where


#: What each tool's findings are called in the verdict.
NOUNS = {"memcheck": ("memory error", "memory errors"), "racecheck": ("shared-memory hazard", "shared-memory hazards"),
         "initcheck": ("uninitialised read", "uninitialised reads"), "synccheck": ("barrier error", "barrier errors")}


def sanitizer_outcome(run: Any) -> SanitizerView:
    """A SanitizerRun (nsightwrap.diagnose.sanitizer) as the verdict sees it: stalled (or stopped at its limit),
    findings (how many the tool counted, the top kind, kernel and line; first, so a run stopped after
    findings keeps them), error (it could not run) or clean."""
    found = list(getattr(run, "findings_list", ()))  # not the DataFrame: no pandas for a verdict
    rows = len(found)
    count = int(getattr(run, "errors", rows) or rows)
    kind, kernel, source = _top(found) if rows else (None, None, None)
    status = str(getattr(run, "status", ""))
    if count or rows:
        outcome = FINDINGS
    elif getattr(run, "stalled", False) or status == "timeout":
        outcome = STALLED
    elif status in ("error", "crashed", "interrupted"):
        outcome = SAN_ERROR
    else:
        outcome = CLEAN
    return SanitizerView(str(run.tool), outcome, count, kind, kernel, source, str(getattr(run, "summary", "") or ""),
                         str(getattr(run, "reason", "") or "")[:200])


def sanitizer_phrase(v: SanitizerView) -> Optional[str]:
    """"racecheck: 12 shared-memory hazards (Race Write/Read) in k (f.cu:88)"; None for a clean run."""
    where = f" in {short(v.kernel)}" if v.kernel and v.kernel != "None" else ""
    if v.outcome == FINDINGS:
        one, many = NOUNS.get(v.tool, ("error", "errors"))
        kind = f" ({v.kind})" if v.kind and v.kind != "None" else ""
        return f"{v.tool}: {v.count} {one if v.count == 1 else many}{kind}{where}" + (
            f" ({os.path.basename(v.source)})" if v.source else "")
    if v.outcome == STALLED:
        return f"{v.tool}: stalled{where}"
    return None


def plain_phrase(runs: Sequence[PlainRun], label: str = "without ncu", guess: bool = True) -> Optional[str]:
    """"fails without ncu in 3 of 20 runs (cudaErrorIllegalAddress in k)", "... hangs ...", or None.
    guess: where no launch was in flight, name the last kernel launched (as a guess, said so)."""
    parts = []
    for outcome, verb in ((FAILED, "fails"), (HUNG, "hangs")):
        bad = [r for r in runs if r.outcome == outcome]
        if not bad:
            continue
        errors = Counter(r.error.name for r in bad if r.error)
        kernels = Counter(short(r.kernel) for r in bad if r.kernel)
        last = Counter(short(r.last_launch) for r in bad if not r.kernel and r.last_launch)
        detail = [errors.most_common(1)[0][0]] if errors else []
        if kernels:
            detail.append(f"in {kernels.most_common(1)[0][0]}")
        elif last and guess:  # nothing in flight: where it most likely was, said as such
            detail.append(f"after {last.most_common(1)[0][0]}, the last kernel launched")
        parts.append(f"{verb} {label} in {len(bad)} of {len(runs)} runs" + (f" ({' '.join(detail)})" if detail else ""))
    return "; ".join(parts) or None


def _walk_phrase(w: WalkView) -> str:
    kernel, hung = w.hung[0]
    works = [s for k, s in w.works if k == kernel] or [s for _, s in w.works]
    tail = f"; works with {works[0]}" if works else "; no settings tried worked"
    return f"{PROFILER_INDUCED}: {kernel} hangs under ncu with {hung}{tail}"


def _sanitizers_said(sanitizers: Sequence[SanitizerView]) -> str:
    """"memcheck, racecheck found nothing; initcheck could not run (why)": only the tools that ran clean
    found nothing (a stalled one is said in the lead)."""
    if not sanitizers:
        return "no sanitizer was run"
    clean = [v.tool for v in sanitizers if v.outcome == CLEAN]
    said = [f"{', '.join(clean)} found nothing"] if clean else []
    said += [f"{v.tool} could not run" + (f" ({v.reason})" if v.reason else "") for v in sanitizers
             if v.outcome == SAN_ERROR]
    return "; ".join(said) or "no sanitizer ran to its end"


def judge(runs: Sequence[PlainRun], sanitizers: Sequence[SanitizerView], walk: Optional[WalkView],
          blocking: Optional[PlainRun] = None) -> tuple[str, str]:
    """(status, the verdict line)."""
    found = [p for p in (sanitizer_phrase(v) for v in sanitizers) if p and not p.endswith("stalled")]
    named = blocking is not None and blocking.kernel is not None  # CUDA_LAUNCH_BLOCKING=1 named it: no guess
    plain = plain_phrase(runs, guess=not named)
    if plain is None and runs:
        plain = f"runs cleanly without ncu in {len(runs)} of {len(runs)} runs"
    if blocking is not None and blocking.kernel:
        plain = (plain or "") + f"; with CUDA_LAUNCH_BLOCKING=1 it {blocking.outcome} in {short(blocking.kernel)}"
    bad_runs = any(r.outcome in (FAILED, HUNG) for r in runs)
    if found or bad_runs or (walk is not None and walk.program_fault):
        parts = found + ([plain] if plain else []) + ([walk.program_fault] if walk and walk.program_fault else [])
        return PROGRAM_FAULT, "; ".join(parts) + f": {NOT_PROFILER}"
    stalled = [p for p in (sanitizer_phrase(v) for v in sanitizers) if p]
    if walk is not None and walk.hung:
        return PROFILER_INDUCED, _walk_phrase(walk)
    lead = "; ".join(stalled + ([plain] if plain else [])) or "nothing run"
    found = _sanitizers_said(sanitizers)
    if walk is None:
        return OK, f"{lead}; {found}: if it hangs under ncu, run triage --walk"
    return OK, f"{lead}; {found}; ncu did not hang ({walk.status})"

"""Triage's runs as hang-store rows (store.triage.TriageRecord), each with its hypothesis and conclusion."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from nsightwrap.diagnose.plain import FAILED, FINISHED, PlainRun
from nsightwrap.diagnose.verdict import CLEAN, FINDINGS, STALLED, SanitizerView, WalkView, sanitizer_phrase
from nsightwrap.errors import StoreError
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.store.triage import TriageRecord, record_triage

__all__ = ["HYPOTHESES", "blocking_record", "plain_record", "sanitizer_record", "save", "verdict_record",
           "walk_record"]

#: What each sanitizer tool tests.
HYPOTHESES = {
    "memcheck": "the kernel reads or writes out of bounds or misaligned (memcheck finds such accesses)",
    "racecheck": "threads of a block race on shared memory (racecheck finds the hazards)",
    "synccheck": "the kernel uses __syncthreads() or another barrier wrongly (synccheck)",
    "initcheck": "the kernel reads device memory that was never written (initcheck)",
}


def save(store: Optional[HangStore], rows: Sequence[TriageRecord], env: Environment, notes: list[str]) -> None:
    """Record rows; a store that cannot be written costs a note, never the triage."""
    if store is None:
        return
    try:
        record_triage(store, rows, env)
    except StoreError as e:
        note = f"not recorded in the hang store: {str(e).splitlines()[0]}"
        if note not in notes:
            notes.append(note)


def _plain_conclusion(run: PlainRun) -> str:
    if run.outcome == FINISHED:
        return f"run {run.index} finished without ncu: no failure this time"
    where = f" in {run.kernel}" if run.kernel else ""
    what = f"fails ({run.error})" if run.outcome == FAILED and run.error else (
        "fails" if run.outcome == FAILED else "hangs")
    return f"the program {what}{where} without ncu: a fault of the program, not of ncu"


def plain_record(triage_id: str, command: Sequence[str], run: PlainRun, of: int) -> TriageRecord:
    return TriageRecord(triage_id, tuple(command), "plain", run.outcome, run.kernel or "*",
                        {"run": run.index, "of": of, "env": dict(run.env)}, run.exit_code, run.elapsed_s,
                        str(run.error) if run.error else None, None,
                        f"the program fails or hangs by itself, without ncu (run {run.index} of {of})",
                        _plain_conclusion(run), run.reason if run.outcome != FINISHED else "")


def blocking_record(triage_id: str, command: Sequence[str], run: PlainRun, first: PlainRun) -> TriageRecord:
    if run.outcome == FINISHED:
        concl = ("with CUDA_LAUNCH_BLOCKING=1 it did not fail this time: the failure is intermittent or depends "
                 "on timing")
    else:
        concl = (f"with launches synchronous it {run.outcome} in {run.kernel}: that kernel causes it" if run.kernel
                 else f"with launches synchronous it {run.outcome} too ({run.error or 'no CUDA error printed'})")
    return TriageRecord(triage_id, tuple(command), "plain", run.outcome, run.kernel or "*",
                        {"run": run.index, "env": dict(run.env)}, run.exit_code, run.elapsed_s,
                        str(run.error) if run.error else None, None,
                        f"{first.error} is reported asynchronously, at a later API call than the launch that caused "
                        "it: with CUDA_LAUNCH_BLOCKING=1 it surfaces at the kernel itself", concl, run.reason)


def sanitizer_record(triage_id: str, command: Sequence[str], view: SanitizerView, run: Any,
                     kernel: Optional[str]) -> TriageRecord:
    if view.outcome == FINDINGS:
        concl = f"{sanitizer_phrase(view)}: the kernel is at fault, not ncu"
    elif view.outcome == STALLED:
        concl = f"{view.tool} stalled and was stopped within its calibrated allowance; its findings so far are kept"
    elif view.outcome == CLEAN:
        concl = f"{view.tool} found nothing in this run"
    else:
        concl = f"{view.tool} could not run: {view.summary or 'see its output'}"
    settings = {"tool": view.tool} | ({"kernel": kernel} if kernel else {})
    return TriageRecord(triage_id, tuple(getattr(run, "command", None) or command), view.tool, view.outcome,
                        view.kernel or "*", settings, getattr(run, "exit_code", None), getattr(run, "elapsed_s", None),
                        view.summary[:500] or None, view.count, HYPOTHESES.get(view.tool, view.tool), concl)


def walk_record(triage_id: str, command: Sequence[str], view: WalkView, result: Any, options: Any) -> TriageRecord:
    kernel = view.hung[0][0] if view.hung else (options.kernel or "*")
    if view.hung:
        works = [s for k, s in view.works if k == kernel]
        concl = f"{kernel} hangs under ncu with {view.hung[0][1]}" + (
            f" and works with {works[0]}: profiler-induced" if works else "; no settings tried worked")
    else:
        concl = view.program_fault or f"no hang under ncu ({view.status})"
    elapsed = sum(a.elapsed_s or 0.0 for a in getattr(result, "attempts", []))
    return TriageRecord(triage_id, tuple(command), "ncu-walk", view.status, kernel,
                        {"set": options.set, "ladder": options.ladder} | ({"kernel": options.kernel}
                                                                          if options.kernel else {}),
                        None, elapsed, None, None,
                        "the hang depends on what ncu collects: some settings of the ladder work", concl)


def verdict_record(triage_id: str, command: Sequence[str], result: Any) -> TriageRecord:
    return TriageRecord(triage_id, tuple(command), "triage", result.status, result.kernel or "*",
                        {"runs": len(result.runs)}, result.exit_code, result.elapsed_s, None, None,
                        "is it ncu or the kernel?", result.verdict)

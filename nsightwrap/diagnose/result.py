"""TriageResult: what `nsightwrap triage` found, with its verdict, status, exit code and to_dict()."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from nsightwrap.diagnose.plain import FAILED, HUNG, PlainRun
from nsightwrap.secrets import mask_argv, mask_doc
from nsightwrap.status import EXIT_CODES

__all__ = ["TriageResult"]


@dataclass(frozen=True)
class TriageResult:
    """runs: the runs without ncu; blocking: the last CUDA_LAUNCH_BLOCKING=1 run, if one was made (tries: all of
    them, as an intermittent failure may take a few draws to show); sanitizers:
    (SanitizerView, diagnose.sanitizer's SanitizerRun) per tool; walk: (WalkView, LadderResult) with --walk;
    kernel: the kernel in question (--kernel, else the one the runs named, else the first sanitizer
    findings'); elapsed_s: the whole triage; runs_s: the runs it made (each program's wall time under the
    watchdog, the walk's whole wall time); overhead_s: the rest, triage's own cost."""

    command: list[str]
    status: str
    verdict: str
    kernel: Optional[str]
    runs: tuple[PlainRun, ...]
    blocking: Optional[PlainRun]
    sanitizers: tuple[tuple[Any, Any], ...]
    walk: Optional[tuple[Any, Any]]
    elapsed_s: float
    triage_id: str
    notes: tuple[str, ...] = ()
    walk_s: float = 0.0  # the ncu walk's wall time, its own set-up included (it counts as one run)
    blocking_tries: tuple[PlainRun, ...] = ()  # every CUDA_LAUNCH_BLOCKING=1 run; blocking is the last

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def failed(self) -> int:
        return sum(r.outcome == FAILED for r in self.runs)

    @property
    def hung(self) -> int:
        return sum(r.outcome == HUNG for r in self.runs)

    @property
    def runs_s(self) -> float:
        """Wall time of the runs it made (the programs' own, under the watchdog)."""
        tries = self.blocking_tries or ((self.blocking,) if self.blocking is not None else ())
        total = sum(r.elapsed_s for r in self.runs) + sum(r.elapsed_s for r in tries)
        total += sum(getattr(run, "elapsed_s", 0.0) or 0.0 for _, run in self.sanitizers)
        return total + self.walk_s

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.elapsed_s - self.runs_s)

    @property
    def findings(self) -> Any:
        """Every sanitizer finding, one DataFrame (pandas loaded here only)."""
        import pandas as pd

        frames = [run.findings for _, run in self.sanitizers if getattr(run, "findings", None) is not None]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def summary(self) -> str:
        lines = [f"triage: {self.verdict}"]
        lines += [f"  run {r.index}: {r.reason}" for r in self.runs]
        for r in self.blocking_tries or ((self.blocking,) if self.blocking is not None else ()):
            lines.append(f"  CUDA_LAUNCH_BLOCKING=1 (run {r.index}): {r.reason}")
        lines += [f"  {v.tool}: {v.outcome}" + (f" ({v.count} finding(s))" if v.count else "")
                  for v, _ in self.sanitizers]
        if self.walk is not None:
            lines.append(f"  ncu walk: {self.walk[0].status}")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def to_dict(self) -> dict[str, Any]:
        def sanitizer(view: Any, run: Any) -> dict[str, Any]:
            d = {"tool": view.tool, "outcome": view.outcome, "count": view.count, "kind": view.kind,
                 "kernel": view.kernel, "source": view.source}
            to_dict = getattr(run, "to_dict", None)
            return d | {"run": to_dict()} if callable(to_dict) else d

        walk = None
        if self.walk is not None:
            v = self.walk[0]
            walk = {"status": v.status, "hung": [list(h) for h in v.hung], "works": [list(w) for w in v.works],
                    "program_fault": v.program_fault}
        return mask_doc({
            "status": self.status, "exit_code": self.exit_code, "verdict": self.verdict, "reason": self.verdict,
            "kernel": self.kernel,
            "command": mask_argv(self.command), "triage_id": self.triage_id,
            "runs": [r.to_dict() for r in self.runs], "failed": self.failed, "hung": self.hung,
            "of": len(self.runs), "blocking": self.blocking.to_dict() if self.blocking else None,
            "blocking_tries": len(self.blocking_tries),
            "sanitizers": [sanitizer(v, r) for v, r in self.sanitizers], "walk": walk,
            "elapsed_s": round(self.elapsed_s, 3), "runs_s": round(self.runs_s, 3),
            "overhead_s": round(self.overhead_s, 3), "notes": list(self.notes)})

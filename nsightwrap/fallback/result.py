"""What a ladder walk gives back: its steps, and the rows of every rung merged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from nsightwrap.fallback.ladder import Ladder, Rung
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import ERROR, EXIT_CODES, HANG, OK

if TYPE_CHECKING:  # imported on first use: a walk loads it while its first attempt runs (fallback.reads)
    import pandas as pd

__all__ = ["ATTEMPT_COLUMN", "JOB_COLUMN", "KNOWN_EMPTY", "KNOWN_HANG", "LadderResult", "RUNG_COLUMN", "Step",
           "merged_attrs"]

#: Columns the walk adds to every row of the merged DataFrame.
RUNG_COLUMN, ATTEMPT_COLUMN, JOB_COLUMN = "rung", "attempt", "job"
#: Why a step was skipped when the hang store knows the rung hangs for the kernel.
KNOWN_HANG = "known to hang here (hang store)"
KNOWN_EMPTY = "profiled nothing of it in this program before (hang store)"


@dataclass(frozen=True)
class Step:
    """One rung tried (or skipped) for one job: the main program or one kernel."""

    job: str  # "main" or the kernel's name
    rung: Rung
    rung_index: int
    attempt: Optional[Attempt] = None
    skipped: Optional[str] = None  # why it was not run
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        # Counted from 1, as the live progress line counts ("rung 5/5").
        what = f"[{self.job}] rung {self.rung_index + 1} {self.rung.name!r} ({self.rung.describe()})"
        if self.skipped:
            return f"{what}: skipped, {self.skipped}"
        a = self.attempt
        return f"{what}: {a.status}, {a.n_kernels} kernel(s)" + (f", hung on {a.stalled_kernel}" if a.stall else "")


@dataclass
class LadderResult:
    """The merged outcome of a walk: rows from every rung, and how they came."""

    ladder: Ladder
    steps: list[Step] = field(default_factory=list)
    frames: list[pd.DataFrame] = field(default_factory=list)
    unprofiled: list[str] = field(default_factory=list)  # hung at every rung
    stopped: Optional[str] = None  # why the walk ended early, if it did
    why_unprofiled: dict[str, str] = field(default_factory=dict)  # kernel -> why no rung profiled it
    processes: int = 1  # the job's processes (ranks)
    gpus: Optional[int] = None  # the GPUs they could use here, when known
    notes: list[str] = field(default_factory=list)  # the store's, e.g. the team's database was down
    #: On a cluster engine (Session.executor): each job's timeline (executor.JobTimes: where, submitted, node
    #: times, seen), in the order they were submitted.
    jobs: list = field(default_factory=list)

    @property
    def attempts(self) -> list[Attempt]:
        return [s.attempt for s in self.steps if s.attempt is not None]

    @property
    def hangs(self) -> list[tuple[str, str]]:
        """(kernel, rung) for every hang met, skipped known hangs included."""
        out = [(s.attempt.stalled_kernel, s.rung.name) for s in self.steps if s.attempt and s.attempt.status == HANG]
        out += [(s.job, s.rung.name) for s in self.steps if s.skipped == KNOWN_HANG]
        return out

    @property
    def program_fault(self) -> Optional[Attempt]:
        """The attempt that found the program hanging or failing by itself, without ncu (the walk stopped
        there; see Attempt.program_fault), if one did."""
        return next((a for a in self.attempts if a.program_fault), None)

    @property
    def status(self) -> str:
        """A program fault's own status (timeout, crashed); else error when the walk stopped early, hang when
        a kernel hung at every rung, else ok."""
        fault = self.program_fault
        if fault is not None:
            return fault.status
        return ERROR if self.stopped else HANG if self.unprofiled else OK

    @property
    def exit_code(self) -> int:
        """The exit code of `status`, as `run --profile` exits with it."""
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict:
        """Plain types for JSON (what `run --profile --json` prints), secret values masked."""
        df = self.df
        fault = self.program_fault
        return mask_doc({
            "status": self.status, "exit_code": self.exit_code, "ladder": self.ladder.name,
            "steps": [{"job": s.job, "rung": s.rung.name, "skipped": s.skipped, "notes": list(s.notes),
                       "attempt": s.attempt.to_dict() if s.attempt else None} for s in self.steps],
            "rows": [{"function": f, "rung": r} for f, r in zip(df.get("function", []), df.get(RUNG_COLUMN, []))],
            "hangs": [list(h) for h in self.hangs], "unprofiled": self.unprofiled, "stopped": self.stopped,
            "why_unprofiled": self.why_unprofiled, "processes": self.processes, "gpus": self.gpus,
            "program_fault": fault.program_fault if fault else None, "reports": self.report_paths,
            "notes": list(self.notes)})

    @property
    def report_paths(self) -> list[str]:
        return [str(a.report) for a in self.attempts if a.report]

    @property
    def df(self) -> pd.DataFrame:
        """Every rung's rows; attrs["units"] merged from every report (pd.concat drops attrs that differ)."""
        import pandas as pd

        frames = [f for f in self.frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=[RUNG_COLUMN, ATTEMPT_COLUMN, JOB_COLUMN])
        merged = pd.concat(frames, ignore_index=True)
        merged.attrs = merged_attrs(frames)
        return merged

    def summary(self) -> str:
        job = "" if self.processes == 1 else f" on a job of {self.processes} processes ({self.gpus or '?'} GPU(s))"
        lines = [f"ladder {self.ladder.name}: {len(self.attempts)} attempt(s){job}"]
        lines += ["  " + s.describe() for s in self.steps]
        if self.unprofiled:
            lines.append("hung at every rung: " + ", ".join(self.unprofiled))
            lines += [f"  {k}: {self.why_unprofiled[k]}" for k in self.unprofiled if k in self.why_unprofiled]
        if self.stopped:
            lines.append("stopped early: " + self.stopped)
        return mask_text("\n".join(lines))


def merged_attrs(frames: Sequence[pd.DataFrame]) -> dict:
    """The attrs of frames read from several reports: units merged, and the reports listed."""
    from nsightwrap.reports.ncu.schema import SharedAttr

    units: dict = {}
    reports: list = []
    for f in frames:
        units.update(f.attrs.get("units", {}))
        if f.attrs.get("report") is not None and f.attrs["report"] not in reports:
            reports.append(f.attrs["report"])
    return {"units": SharedAttr(units), "reports": reports}

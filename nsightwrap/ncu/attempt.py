"""What one watched profiler run did, in one record.

An Attempt is built once from the raw RunOutcome and never changes. Its
status is one of STATUSES; each has its own exit code for the CLI.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence

from nsightwrap.errors import AttemptFailed, AttemptHung
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.progress import Stall
from nsightwrap.ncu.tally import RunTally
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import (
    CRASHED,
    ERROR,
    EXIT_CODES,
    HANG,
    INTERRUPTED,
    NO_KERNELS,
    OK,
    ReplayMode,
)
from nsightwrap.watch.notes import stop_notes
from nsightwrap.watch.run import RunOutcome
from nsightwrap.watch.tree import StopRecord

_APP_RC = re.compile(r"The application returned an error code \((-?\d+)\)")

#: What to do about ERR_NVGPUCTRPERM (this user may not read the GPU performance counters): one text,
#: given by a failed attempt and by doctor's counter probe alike.
COUNTERS_REMEDY = ("run as root (sudo), or let every user read the counters: as root, write "
                   "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` to /etc/modprobe.d/nsight.conf and "
                   "reboot (or reload the nvidia modules); in a container, start it with --cap-add=SYS_ADMIN. "
                   "See https://developer.nvidia.com/ERR_NVGPUCTRPERM")

#: Why a collective hangs whenever every rank of a multi-process job is profiled (FACTS, "Multi-process
#: programs"): said by the walk (fallback.collectives) and by the debug log (store.debuglog).
SERIALISED = ("ncu serialises kernel launches across the profiled processes, so a collective's other half "
              "never starts")

#: What to do next about errors ncu is known to print.
_ERROR_HINTS = (
    ("ERR_NVGPUCTRPERM", f"this user may not read the GPU performance counters: {COUNTERS_REMEDY}"),
    ("not supported during range replay", "drop that option, or use kernel replay"),
    ("did not match any section", "run `ncu --list-sections` (or `--list-sets`) for the valid ids"),
    ("already exists", "choose another report path, or pass force_overwrite / -f"),
    ("Failed to launch", "check that the program exists and is executable"),
    ("Failed to prepare kernel for profiling", "the GPU's performance counters were busy or the GPU is in a bad "
                                               "state: look for leftover processes (nvidia-smi; `python -m "
                                               "nsightwrap cleanup`) or a monitor such as DCGM, then retry"),
    ("Unknown Error on device", "the profiler could not use the GPU: look for leftover processes (nvidia-smi; "
                                "`python -m nsightwrap cleanup`), then retry"),
)


@dataclass(frozen=True)
class KernelResult:
    """A kernel whose profile finished (kernel replay) or whose passes ran (application replay)."""

    name: str
    kernel_id: int
    passes: int
    replay: str = ReplayMode.KERNEL.value


@dataclass(frozen=True)
class Attempt:
    """One watched run: what was asked, what happened, what was kept."""

    status: str
    reason: str
    command: tuple[str, ...]
    returncode: Optional[int]
    kernels: tuple[KernelResult, ...]
    stall: Optional[Stall]
    report: Optional[Path]
    report_complete: bool
    elapsed_s: float
    stop: Optional[StopRecord]
    warnings: tuple[str, ...]
    errors: tuple[str, ...]
    notes: tuple[str, ...]
    log: str
    started_at: str
    cookie: str
    slow_launch_warnings: int = 0
    gpu_foreign_before: tuple[str, ...] = ()
    gpu_left_after: tuple[str, ...] = ()
    ncu: Optional[str] = None  # the ncu that ran (the report is read with it)
    connected: int = 0  # the most processes ncu was connected to at once (2+: a multi-process program)
    calibration: Optional[Calibration] = None  # what the per-kernel allowances were based on
    #: Set when the program itself hangs or fails without ncu (found by calibrating): not an ncu verdict.
    program_fault: Optional[str] = None
    #: Kernels profiled, exactly (None: len(kernels)); `kernels` keeps the first and last
    #: nsightwrap.ncu.tally.KEPT_KERNELS of them.
    kernel_count: Optional[int] = None
    #: ncu's error and warning lines counted but not kept (the first and last KEPT_LINES are kept).
    errors_not_kept: int = 0
    warnings_not_kept: int = 0

    # --- derived -------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def finished_kernels(self) -> tuple[KernelResult, ...]:
        """The kernels whose profile completed: the one definition of "finished".

        The stalled launch never finished. In application replay a kernel
        is done only when every pass ran, so after a stop no kernel is
        (ncu prints a pass line for a kernel and then hangs in it).
        """
        stalled = (self.stall.kernel, self.stall.kernel_id) if self.stall else None
        return tuple(k for k in self.kernels
                     if (k.name, k.kernel_id) != stalled
                     and (k.replay == ReplayMode.KERNEL.value or (self.status == OK and stalled is None)))

    @property
    def n_kernels(self) -> int:
        """Kernels profiled, exactly, however many `kernels` lists."""
        return len(self.kernels) if self.kernel_count is None else self.kernel_count

    @property
    def finished_count(self) -> int:
        """How many kernels finished (see finished_kernels), exactly, however many `kernels` lists."""
        finished = self.finished_kernels
        if self.kernels and not finished and self.kernels[0].replay != ReplayMode.KERNEL.value:
            return 0  # application replay stopped: no kernel ran every pass
        return self.n_kernels - (len(self.kernels) - len(finished))

    @property
    def stalled_kernel(self) -> Optional[str]:
        return self.stall.kernel if self.stall else None

    @property
    def detection_s(self) -> Optional[float]:
        """From the stalled kernel's last progress mark to the verdict."""
        return self.stall.silent_s if self.stall else None

    @property
    def allowance_basis(self) -> Optional[str]:
        """What the stalled kernel's allowance was based on (calibration, default, given)."""
        return self.stall.basis if self.stall else None

    @property
    def stop_s(self) -> Optional[float]:
        """From the verdict to a clean tree (every process gone)."""
        return self.stop.duration_s if self.stop else None

    def describe(self) -> str:
        """A short paragraph for people: what happened and what was kept."""
        lines = [f"{self.status}: {self.reason}"]
        if self.stall:
            lines.append(self.stall.evidence())
        if self.kernels:
            lines.append(f"{self.n_kernels} kernel(s) profiled: " + ", ".join(
                f"{k.name}#{k.kernel_id} ({k.passes} pass{'es' if k.passes != 1 else ''})" for k in self.kernels[:8])
                + (" ..." if self.n_kernels > 8 else ""))
        if self.report:
            kind = "report" if self.report_complete else "partial report (kept)"
            lines.append(f"{kind}: {self.report}")
        if self.stop:
            lines.append(f"stopped in {self.stop.duration_s:.1f} s: " + "; ".join(self.stop.steps))
            if self.stop.survivors:
                lines.append("WARNING: still alive after SIGKILL: " + ", ".join(self.stop.survivors))
        lines.extend(f"note: {n}" for n in self.notes)
        return mask_text("\n".join(lines))

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON; secret values masked (the command run kept them: ``self.command``)."""
        return mask_doc({
            "status": self.status,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "kernels": [{"name": k.name, "id": k.kernel_id, "passes": k.passes, "replay": k.replay}
                        for k in self.kernels],
            "kernel_count": self.n_kernels,
            "stalled_kernel": self.stalled_kernel,
            "stall": None if self.stall is None else {
                "kernel": self.stall.kernel, "id": self.stall.kernel_id, "where": self.stall.where,
                "silent_s": round(self.stall.silent_s, 3), "allowance_s": round(self.stall.allowance_s, 3),
                "detected_at_s": round(self.stall.detected_at_s, 3),
                "before_first_progress": self.stall.before_first_progress, "first_pass": self.stall.first_pass,
                "slow_launch_warning_seen": self.stall.slow_warning_seen,
                "allowance_basis": self.stall.basis, "calibrated": self.stall.calibrated,
                "known_cause": self.stall.known_cause},
            "report": None if self.report is None else str(self.report),
            "report_complete": self.report_complete,
            "elapsed_s": round(self.elapsed_s, 3),
            "detection_s": None if self.detection_s is None else round(self.detection_s, 3),
            "allowance_basis": self.allowance_basis,
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "program_fault": self.program_fault,
            "stop": None if self.stop is None else {
                "reason": self.stop.reason, "steps": self.stop.steps, "graceful": self.stop.graceful,
                "killed": self.stop.killed, "survivors": self.stop.survivors,
                "duration_s": round(self.stop.duration_s, 3)},
            "returncode": self.returncode,
            "command": list(self.command),
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "errors_not_kept": self.errors_not_kept,
            "warnings_not_kept": self.warnings_not_kept,
            "notes": list(self.notes),
            "slow_launch_warnings": self.slow_launch_warnings,
            "gpu_foreign_before": list(self.gpu_foreign_before),
            "gpu_left_after": list(self.gpu_left_after),
            "started_at": self.started_at,
            "cookie": self.cookie,
            "ncu": self.ncu,
            "connected_processes": self.connected,
        })

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    def raise_for_status(self) -> "Attempt":
        """Return self when ok; else raise AttemptHung / AttemptFailed carrying this record."""
        if self.status == HANG:
            raise AttemptHung(self)
        if self.status != OK:
            raise AttemptFailed(self)
        return self

    def __repr__(self) -> str:
        return (f"<Attempt {self.status} kernels={self.n_kernels} stalled={self.stalled_kernel!r} "
                f"report={str(self.report) if self.report else None!r} {self.elapsed_s:.1f}s>")


def tally_of(outcome: RunOutcome) -> RunTally:
    """The run's tally: the observer's, folded from every event, else one folded from the kept events."""
    return outcome.summary if isinstance(outcome.summary, RunTally) else RunTally.of(outcome.events)


def _kernels(tally: RunTally) -> tuple[KernelResult, ...]:
    if not tally.application_replay:
        return tuple(KernelResult(*k) for k in tally.done.items())
    return tuple(KernelResult(name, kid, n, ReplayMode.APPLICATION.value)
                 for (kid, name), n in sorted(tally.replay.items()))


def _hint(errors: tuple[str, ...]) -> str:
    for needle, hint in _ERROR_HINTS:
        if any(needle in e for e in errors):
            return f" ({hint})"
    return ""


def classify(outcome: RunOutcome, kernels: int, errors: Sequence[str],
             warnings: Sequence[str]) -> tuple[str, str]:
    """The status and a one-line reason, from how the run ended (`kernels`: how many were profiled)."""
    rc = outcome.returncode
    if outcome.interrupted:  # also while stopping a hang: the user asked to stop, and exit 130 says so
        during = f" while stopping a {outcome.verdict.status} ({outcome.verdict.reason})" if outcome.verdict else ""
        return INTERRUPTED, f"interrupted (Ctrl-C or a termination signal){during}; the tree was stopped"
    if outcome.verdict is not None:
        return outcome.verdict.status, outcome.verdict.reason
    if outcome.exception is not None:
        return ERROR, f"nsightwrap failed while watching: {outcome.exception!r}"
    app_rc = [int(m[1]) for e in errors for m in [_APP_RC.search(e)] if m]
    if rc == 0:
        if kernels:
            return OK, f"{kernels} kernel(s) profiled"
        if errors:
            # ncu can fail to profile and still exit 0 with "No kernels were profiled".
            return ERROR, errors[0] + _hint(errors)
        why = next((w for w in warnings if "No kernels were profiled" in w or "No ranges were profiled" in w),
                   "ncu profiled nothing")
        return NO_KERNELS, (f"{why} Check the kernel filter, or, for range replay, that the program marks "
                            "ranges (cudaProfilerStart/Stop or NVTX)")
    if rc is not None and rc < 0:
        return CRASHED, f"the profiler was killed by signal {-rc} from outside nsightwrap"
    if app_rc:
        return CRASHED, f"the profiled program failed (exit code {app_rc[-1]}); kernels before the failure are kept"
    first = errors[0] if errors else f"ncu exited with code {rc}"
    return ERROR, first + _hint(errors)


def build_attempt(outcome: RunOutcome, *, export: Optional[Path] = None, notes: Sequence[str] = (),
                  ncu: Optional[str] = None, gpu_foreign_before: Sequence[str] = (),
                  gpu_left_after: Sequence[str] = (), calibration: Optional[Calibration] = None) -> Attempt:
    tally = tally_of(outcome)
    kernels = _kernels(tally)
    errors, warnings = tuple(tally.errors.items()), tuple(tally.warnings.items())
    status, reason = classify(outcome, tally.kernel_count, errors, warnings)
    warnings += tuple(outcome.warnings)  # nsightwrap's own, after ncu's
    written = Path(tally.report) if tally.report is not None else None
    report = written or (export if export is not None and export.exists() else None)
    if status == OK and export is not None and (report is None or not report.exists()):
        # The kernels ran, but what they were profiled for is not on disk (full disk, a folder
        # that became unwritable): that is a failure, not "N kernel(s) profiled".
        status, reason = ERROR, (f"ncu profiled {tally.kernel_count} kernel(s) but did not write the report {export}"
                                 + (f": {errors[0]}" if errors else "")
                                 + "; check that its folder is writable and the disk not full, then run again")
    notes = [*notes, *stop_notes(outcome, "the program")]
    return Attempt(
        status=status,
        reason=reason,
        command=tuple(outcome.argv),
        returncode=outcome.returncode,
        kernels=kernels,
        stall=outcome.verdict.stall if outcome.verdict else None,
        report=report,
        report_complete=status == OK and written is not None,
        elapsed_s=outcome.elapsed_s,
        stop=outcome.stop,
        warnings=warnings,
        errors=errors,
        notes=tuple(notes),
        log=outcome.log,
        started_at=datetime.fromtimestamp(outcome.started_wall, timezone.utc).isoformat(timespec="seconds"),
        cookie=outcome.cookie,
        slow_launch_warnings=tally.slow_warnings,
        gpu_foreign_before=tuple(gpu_foreign_before),
        gpu_left_after=tuple(gpu_left_after),
        ncu=ncu,
        connected=tally.most_connected,
        calibration=calibration,
        kernel_count=tally.kernel_count,
        errors_not_kept=tally.errors.not_kept,
        warnings_not_kept=tally.warnings.not_kept,
    )

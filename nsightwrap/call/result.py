"""ProfileResult: what profile(fn) gives back."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.result import LadderResult
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.secrets import mask_doc
from nsightwrap.status import EXIT_CODES

if TYPE_CHECKING:  # pandas loads with the first frame (fallback.result), not with profile(fn)'s import
    import pandas as pd

__all__ = ["ProfileResult"]

_NO_VALUE = object()


@dataclass
class ProfileResult:
    """What profile(fn) gives back: the walk's rows and attempts, fn's value, the allowance used."""

    walk: LadderResult
    calibration_s: Optional[float] = None  # one call of fn without profiling, when known
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    value_pickle: Optional[bytes] = field(default=None, repr=False)  # unpickled on first use of .value
    value_error: Optional[str] = None
    range_api: str = ""  # how the child marked the profiled range (for "nothing profiled" messages)
    calibration_source: str = ""  # where calibration_s came from (nsightwrap.call.calibration)
    _value: Any = field(default=_NO_VALUE, repr=False)
    #: profile(fn, triage=...): nsightwrap.triage's TriageResult for fn, when one was made.
    triage: Any = None

    @property
    def df(self) -> pd.DataFrame:
        """One row per profiled launch, with the rung that produced it (column `rung`)."""
        return self.walk.df

    @property
    def attempts(self) -> list[Attempt]:
        return self.walk.attempts

    @property
    def report_paths(self) -> list[str]:
        return self.walk.report_paths

    @property
    def hangs(self) -> list[tuple[str, str]]:
        """(kernel, rung) of every hang met or skipped as known."""
        return self.walk.hangs

    @property
    def hung(self) -> bool:
        return bool(self.hangs)

    @property
    def program_fault(self) -> Optional[str]:
        """Set when fn's program hangs or fails by itself, without ncu (the walk stopped there): never a hang."""
        fault = self.walk.program_fault
        return fault.program_fault if fault is not None else None

    @property
    def status(self) -> str:
        """The walk's status (ok, hang, error, or the program fault's own: timeout, crashed)."""
        return self.walk.status

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this status (nsightwrap.status.EXIT_CODES), as every result gives it."""
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON, secret values masked; fn's value is not in it (`has_value` says whether
        .value has one)."""
        return mask_doc({
            "status": self.status, "exit_code": self.exit_code,
            "calibration_s": self.calibration_s, "calibration_source": self.calibration_source,
            "stall_timeout": self.stall_timeout, "range_api": self.range_api,
            "has_value": self.value_pickle is not None, "value_error": self.value_error,
            "rows": len(self.df), "hangs": [list(h) for h in self.hangs], "unprofiled": list(self.walk.unprofiled),
            "stopped": self.walk.stopped, "program_fault": self.program_fault,
            "reports": self.report_paths, "attempts": [a.to_dict() for a in self.attempts],
        })

    @property
    def value(self) -> Any:
        """fn's return value, when it pickles; unpickled here, on first use (a CUDA tensor would
        import its framework into the caller)."""
        if self._value is _NO_VALUE:
            if self.value_pickle is None:
                raise NsightwrapError(self.value_error or "no value: no run of fn finished")
            self._value = pickle.loads(self.value_pickle)
        return self._value

    def summary(self) -> str:
        df = self.df
        if not len(df) and not self.hangs:
            return (f"no kernel was profiled in {len(self.attempts)} attempt(s): check kernel= (a regex on the "
                    f"function name); the measured calls were marked with {self.range_api or 'an unknown API'}")
        lines = [f"{len(df)} profiled launch(es) in {len(self.attempts)} attempt(s); "
                 f"stall timeout {self.stall_timeout:.1f} s"
                 + (f" (one call took {self.calibration_s:.3f} s, {self.calibration_source})"
                    if self.calibration_s is not None else "")]
        if len(df) and "function" in df:
            for (fn, rung), n in df.groupby(["function", "rung"], sort=False).size().items():
                lines.append(f"  {fn:<40} {rung:<20} x{n}")
        for k, rung in self.hangs:
            lines.append(f"  HUNG: {k} at rung {rung}")
        if self.walk.unprofiled:
            lines.append("  not profiled at any rung: " + ", ".join(self.walk.unprofiled))
        if self.walk.stopped:
            lines.append("  stopped early: " + self.walk.stopped)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<ProfileResult rows={len(self.df)} attempts={len(self.attempts)} "
                f"hangs={self.hangs!r} reports={len(self.report_paths)}>")

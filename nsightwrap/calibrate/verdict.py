"""What one run of the program without ncu says of the program itself (every calibration source uses it)."""

from __future__ import annotations

from typing import Optional

from nsightwrap.ncu.allowance import Calibration
from nsightwrap.status import CRASHED, TIMEOUT

__all__ = ["program_verdict"]


def program_verdict(*, timed_out: bool, returncode: Optional[int], elapsed_s: float, limit_s: float,
                    source: str, log_tail: str = "") -> Calibration:
    """What one run of the program without ncu says: its wall time, or that it hangs or fails by itself."""
    if timed_out:
        return Calibration.failed(
            TIMEOUT, f"without ncu the program itself did not finish within {limit_s:g} s ({source}): it hangs "
                     "by itself, or runs longer than that (give a longer --calibration-limit, or --timeout for "
                     "an up-front run --calibrate); not an ncu hang",
            source)
    if returncode:
        tail = f"; its last output: {log_tail.strip()[-300:]}" if log_tail.strip() else ""
        return Calibration.failed(
            CRASHED, f"without ncu the program itself fails (exit code {returncode}, {source}): fix the program "
                     f"first; not an ncu hang{tail}", source)
    return Calibration.from_wall(elapsed_s, source)

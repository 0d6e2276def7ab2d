"""Calibrated verdicts: how long each kernel runs without ncu, and confirm-before-record.

Between the data (``store``) and the walks (``fallback``): ``measure`` times
a program without ncu (the CUPTI tracer of ``cupti``, run by ``traced`` and
stopped once the stalled kernel has finished; else nsys; else a plain run), ``confirm`` holds one
program's calibration (stored, else measured once) and turns a stall judged
without it into a confirmed hang, a rerun with the right allowance, or the
program's own failure. The allowance rule itself is in
:mod:`nsightwrap.ncu.allowance`, beside the stall rule that uses it.
"""

from nsightwrap.calibrate.confirm import DEFAULT_LIMIT_S, Calibrator, calibrated_allowance, needs_confirmation
from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.calibrate.measure import measure, measure_plain, measure_with_nsys
from nsightwrap.calibrate.traced import measure_traced
from nsightwrap.calibrate.verdict import program_verdict

__all__ = [
    "Calibrator",
    "DEFAULT_LIMIT_S",
    "StalledKernel",
    "calibrated_allowance",
    "measure",
    "measure_plain",
    "measure_traced",
    "measure_with_nsys",
    "needs_confirmation",
    "program_verdict",
]

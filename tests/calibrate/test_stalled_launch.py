"""Which launch a traced calibration waits for (stalled_launch): only the launches ncu finished before the stalled
one count. On a loaded machine the stalled launch itself finished while the run was being stopped (its 100% came
late): counted, it made the calibration wait for a second launch of the kernel that never came, until the
calibration limit (50 s), and the verdict a false program fault (seen in CI, reproduced under a CPU load of 6)."""

from __future__ import annotations

from nsightwrap.calibrate.confirm import stalled_launch
from nsightwrap.ncu.attempt import Attempt, KernelResult
from nsightwrap.ncu.progress import Stall
from nsightwrap.status import HANG


def _attempt(kernel: str, kernel_id, done: list[tuple[str, int]]) -> Attempt:
    stall = Stall(kernel, kernel_id, "50%..", 0.7, 0.6, 1.0, False, False)
    kernels = tuple(KernelResult(name, i, 1) for name, i in done)
    return Attempt(status=HANG, reason="r", command=("ncu", "app"), returncode=None, kernels=kernels, stall=stall,
                   report=None, report_complete=False, elapsed_s=1.2, stop=None, warnings=(), errors=(), notes=(),
                   log="", started_at="2026-11-27T00:00:00+00:00", cookie="c")


def test_the_stalled_launch_that_finished_during_the_stop_is_not_an_earlier_one():
    assert stalled_launch(_attempt("a", 0, [("a", 0), ("vec_add", 1)])).ordinal == 0


def test_earlier_launches_of_the_kernel_count():
    assert stalled_launch(_attempt("a", 2, [("a", 0), ("vec_add", 1), ("a", 2)])).ordinal == 1
    assert stalled_launch(_attempt("a", 2, [("a", 0), ("vec_add", 1)])).ordinal == 1


def test_without_ncus_launch_id_every_finished_launch_counts_as_before():
    assert stalled_launch(_attempt("a", None, [("a", 0), ("vec_add", 1)])).ordinal == 1

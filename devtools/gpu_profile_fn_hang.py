"""profile(fn) on a CuPy kernel that hangs under ncu, with default settings (no stall_timeout): the
warm-up call's time calibrates the profiled call's kernels, so the hang is called at the floor (2.5 s),
not at the uncalibrated 10 s; the quick ladder's floor comes next. GPU evidence for issue 10.

    python3 devtools/gpu_profile_fn_hang.py
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)
import nsightwrap  # noqa: E402


def spin():
    import cupy_hang_under_ncu

    return cupy_hang_under_ncu.main(60.0)


if __name__ == "__main__":
    t = time.monotonic()
    result = nsightwrap.profile(spin, profile="quick", timeout=120.0)
    took = time.monotonic() - t
    print(result.summary())
    print(f"calibration: one call {result.calibration_s} s ({result.calibration_source}); "
          f"allowance reported {result.stall_timeout:.2f} s")
    for a in result.attempts:
        s = a.stall
        print(f"attempt {a.status} {a.elapsed_s:.1f} s" + ("" if s is None else
              f"; {s.kernel}: silent {s.silent_s:.2f} s, allowance {s.allowance_s:.2f} s, calibrated={s.calibrated},"
              f" first pass={s.first_pass}; basis: {s.basis}"))
    print(f"hung: {result.hung} {result.hangs}; whole call {took:.1f} s")

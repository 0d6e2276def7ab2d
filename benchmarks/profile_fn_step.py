"""The step that benchmarks/bench_profile_fn.py profiles both ways: a matmul and a softmax.

    python3 profile_fn_step.py hand 2048 [--fake]

runs it by hand, as a user would under ncu: one warm-up call, then
cudaProfilerStart/Stop (torch.cuda.profiler) around one call of the step.
profile(fn) imports `step` (or `fake_step`) from here by name.

torch is imported inside the step, not at the top, so that the process that
calls profile(step) never loads it: like ncu in the hand-made run, it only
launches the program. (A harness that already imported torch pays nothing more.)
"""

import os
import sys
import time

FAKE_NCU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fake_ncu")


def step(n):
    """A 2048 x 2048 matmul and a softmax on the GPU; the shape of the result."""
    import torch

    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    return tuple(torch.softmax(a @ b, dim=-1).shape)


def fake_step(n):
    """The same shape of work for the fake ncu of the tests (no GPU): a GEMM and a softmax kernel."""
    if FAKE_NCU not in sys.path:
        sys.path.insert(0, FAKE_NCU)
    import fakecuda

    time.sleep(0.05)  # the call's own CPU time
    fakecuda.launch("ampere_sgemm_128x64_nn")
    fakecuda.launch("softmax_warp_forward")
    return (n, n)


def _range_calls(fake):
    """(sync, start, stop) of the profiler range, as the hand-made script calls them."""
    if fake:
        import fakecuda

        return (lambda: None), fakecuda.profiler_start, fakecuda.profiler_stop
    import torch

    return torch.cuda.synchronize, torch.cuda.profiler.start, torch.cuda.profiler.stop


def hand(n, fake=False):
    """The hand-made run: a warm-up call, then one call inside the profiler range."""
    fn = fake_step if fake else step
    fn(n)
    sync, start, stop = _range_calls(fake)
    sync()
    start()
    fn(n)
    sync()
    stop()


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "hand":
        sys.exit("usage: profile_fn_step.py hand SIZE [--fake]")
    hand(int(sys.argv[2]), fake="--fake" in sys.argv[3:])

"""A PyTorch program of at least WORK seconds whose kernels take milliseconds, with one kernel that hangs
under ncu only (wait_for_host, as examples/cupy_hang_under_ncu.py) after the work.

    python tests/gpu/torch_then_hang.py [WORK=10] [LIMIT=60] [--no-hang]

Without ncu it finishes in about WORK seconds (torch's start-up counted), the hang kernel in microseconds.
Under ncu the hang kernel's launch blocks while it is profiled, so the host never sets its flag. Most of
the time is host work (time.sleep between a few GPU steps), like a data loader: few kernels, a long process.
"""
import ctypes
import sys
import time

T0 = time.monotonic()
import torch  # noqa: E402

SPIN = r"""
extern "C" __global__ void wait_for_host(volatile int* flag, unsigned long long limit_ns, int* result) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > limit_ns) { *result = -1; return; }
    }
    *result = 1;
}
"""


def step(x):
    y = torch.softmax(x @ x, dim=-1)
    torch.cuda.synchronize()
    return y


def hang_under_ncu(limit_s):
    import cupy as cp
    import numpy as np

    rt = cp.cuda.runtime
    host = rt.hostAlloc(8, rt.hostAllocMapped)
    flags = np.ctypeslib.as_array((ctypes.c_int32 * 2).from_address(host))
    flags[:] = 0
    cp.RawKernel(SPIN, "wait_for_host")((1,), (1,), (cp.uint64(host), cp.uint64(int(limit_s * 1e9)),
                                                       cp.uint64(host + 4)))
    flags[0] = 1  # under ncu this runs only after profiling of the kernel ended
    cp.cuda.Device().synchronize()
    print("wait_for_host result", int(flags[1]), "(1: released by the host, -1: gave up)", flush=True)
    rt.freeHost(host)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    work = float(args[0]) if args else 10.0
    limit = float(args[1]) if len(args) > 1 else 60.0
    x = torch.randn(1024, 1024, device="cuda")
    for i in range(3):
        step(x)
        print(f"step {i} at {time.monotonic() - T0:.1f} s", flush=True)
        time.sleep(max(0.0, (work - 1.0) / 3 - 0.05))  # the host's own work
    if "--no-hang" not in sys.argv:
        hang_under_ncu(limit)
    step(x)
    left = work - (time.monotonic() - T0)
    if left > 0:
        time.sleep(left)
    print(f"done in {time.monotonic() - T0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

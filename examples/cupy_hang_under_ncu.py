"""A kernel that runs fine alone and hangs under ncu, on purpose.

It spins on a flag in host-mapped memory that the host sets right after the
(normally asynchronous) launch. Under ncu the launch returns only after the
kernel was profiled, so the host never sets the flag: the profile hangs at
`0%..`. The spin gives up after LIMIT seconds so the GPU is never held for ever.

    python examples/cupy_hang_under_ncu.py                      # finishes in well under a second
    python -m nsightwrap run --stall-timeout 5 -- python examples/cupy_hang_under_ncu.py
"""
import ctypes
import sys

import cupy as cp
import numpy as np

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


def main(limit_s: float = 60.0) -> int:
    rt = cp.cuda.runtime
    host = rt.hostAlloc(8, rt.hostAllocMapped)  # with unified addressing the pointer works on the device too
    flags = np.ctypeslib.as_array((ctypes.c_int32 * 2).from_address(host))
    flags[:] = 0
    kernel = cp.RawKernel(SPIN, "wait_for_host")
    kernel((1,), (1,), (cp.uint64(host), cp.uint64(int(limit_s * 1e9)), cp.uint64(host + 4)))
    flags[0] = 1  # under ncu this runs only after profiling of the kernel ended
    cp.cuda.Device().synchronize()
    print("result", int(flags[1]), "(1: released by the host, -1: gave up)")
    rt.freeHost(host)
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0))

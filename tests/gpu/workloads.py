"""Callables for the GPU tests of profile(fn): imported by name in the child process."""

import sys


def matmul_softmax(n: int = 2048):
    import torch

    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.softmax(a @ b, dim=-1)
    return tuple(c.shape)


def cupy_spin(limit_s: float = 60.0):
    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/examples")
    import cupy_hang_under_ncu

    return cupy_hang_under_ncu.main(limit_s)


if __name__ == "__main__":
    # The same work for a raw ncu run: warm-up outside, one call inside a profiler range.
    import torch

    matmul_softmax(int(sys.argv[1]) if len(sys.argv) > 1 else 2048)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    matmul_softmax(int(sys.argv[1]) if len(sys.argv) > 1 else 2048)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()

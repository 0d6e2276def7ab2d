"""profile(fn) on a Triton kernel: the kernel filter matches Triton's function name.

    python examples/profile_triton.py
"""
import torch
import triton
import triton.language as tl

import nsightwrap


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def triton_add(n: int):
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)  # the warm-up call compiles it
    return float(out.sum())


if __name__ == "__main__":
    result = nsightwrap.profile(triton_add, 1 << 22, kernel="add_kernel", set="basic", warmup=1)
    print(result.summary())
    print(result.df[["function", "gpu__time_duration.sum"]])

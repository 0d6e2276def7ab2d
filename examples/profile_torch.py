"""profile(fn) on a PyTorch workload: only the softmax kernel, basic set.

    python examples/profile_torch.py
"""
import nsightwrap


def matmul_softmax(n: int):
    import torch

    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    return tuple(torch.softmax(a @ b, dim=-1).shape)


if __name__ == "__main__":
    # PyTorch picks softmax_warp_forward or cunn_SoftMaxForward by size: match both.
    result = nsightwrap.profile(matmul_softmax, 4096, kernel="[Ss]oft[Mm]ax", set="basic", warmup=2)
    print(result.summary())
    print(result.df[["function", "rung", "gpu__time_duration.sum"]])
    print("value:", result.value)

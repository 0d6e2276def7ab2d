"""A small PyTorch workload: one matmul and one softmax on the GPU.

    python -m nsightwrap run --set basic -- python examples/torch_matmul_softmax.py
"""
import torch


def main(n: int = 2048) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.softmax(a @ b, dim=-1)
    torch.cuda.synchronize()
    print("torch ok", tuple(c.shape))


if __name__ == "__main__":
    main()

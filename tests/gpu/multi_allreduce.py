"""A 2-rank torchrun program for the multi-process GPU run (devtools/gpu_multi.sh).

Per step each rank does a few matmuls and a softmax, then all-reduces the result over NCCL
(`ncclDevKernel_AllReduce_*`, the collective that hangs when ncu profiles every rank); about
10 s alone on 2x H100, most of it PyTorch and NCCL start-up. Only rank 0 prints.

    torchrun --nproc-per-node 2 tests/gpu/multi_allreduce.py [STEPS] [N]
"""

import os
import sys
import time


def main(steps: int = 3, n: int = 2048) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    t0 = time.monotonic()
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for step in range(steps):
        c = torch.softmax(a @ b, dim=-1) @ b
        dist.all_reduce(c)
        a = c / c.abs().max()
        torch.cuda.synchronize()
        if rank == 0:
            print(f"step {step}: {a[0, 0].item():+.4f} ({time.monotonic() - t0:.1f} s)", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"multi_allreduce: {steps} steps on {int(os.environ['WORLD_SIZE'])} ranks, ok", flush=True)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:3]))

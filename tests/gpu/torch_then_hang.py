"""A PyTorch program of at least WORK seconds whose kernels take milliseconds, with one kernel that hangs
under ncu only (wait_for_host, as examples/cupy_hang_under_ncu.py) after the work.

    python tests/gpu/torch_then_hang.py [WORK=10] [LIMIT=60] [--no-hang]

Without ncu it finishes in about WORK seconds (torch's start-up counted), the hang kernel in microseconds.
Under ncu the hang kernel's launch blocks while it is profiled, so the host never sets its flag. Most of
the time is host work (time.sleep between a few GPU steps), like a data loader: few kernels, a long process.
"""
import importlib.util
import sys
import time
from pathlib import Path

T0 = time.monotonic()
import torch  # noqa: E402

#: The kernel that hangs under ncu only, as the example has it (examples/cupy_hang_under_ncu.py).
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cupy_hang_under_ncu.py"


def step(x):
    y = torch.softmax(x @ x, dim=-1)
    torch.cuda.synchronize()
    return y


def hang_under_ncu(limit_s):
    """The example's wait_for_host, launched once (it imports CuPy: only now, after torch's work)."""
    spec = importlib.util.spec_from_file_location("cupy_hang_under_ncu", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(limit_s)


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

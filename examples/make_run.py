"""What `make run` profiles, and the per-kernel table it prints.

The workload is the first of these that this machine can run:
  1. examples/kernels.cu, built with nvcc (the CUDA toolkit) into build/examples/kernels;
  2. examples/torch_matmul_softmax.py, where PyTorch is installed;
  3. nsightwrap's one-kernel driver-API probe (needs only the NVIDIA driver).
It is profiled with `python -m nsightwrap run --set basic` (live progress on a terminal), and the
report is read back into a DataFrame: one row per kernel launch.

    python examples/make_run.py            (make run does this after `doctor`)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = Path(os.environ.get("MAKE_RUN_BUILD") or ROOT / "build") / "examples"  # build/ is git-ignored
COLUMNS = ["function", "grid_size", "block_size", "gpu__time_duration.sum",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"]


def find_nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [shutil.which("nvcc"), cuda_home and os.path.join(cuda_home, "bin", "nvcc"),
                  "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def build_kernels(nvcc: str) -> Path | None:
    """examples/kernels.cu -> build/examples/kernels (rebuilt when the source is newer)."""
    source, binary = HERE / "kernels.cu", BUILD / "kernels"
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    BUILD.mkdir(parents=True, exist_ok=True)
    for arch in (["-arch=native"], []):  # native needs nvcc >= 11.6 and a visible GPU
        done = subprocess.run([nvcc, "-O2", *arch, "-o", str(binary), str(source)], capture_output=True, text=True)
        if done.returncode == 0:
            return binary
    print(f"make run: nvcc could not build {source}:\n{done.stderr.strip()}", file=sys.stderr)
    return None


def workload() -> tuple[list[str], str]:
    """(command, what it is)."""
    nvcc = find_nvcc()
    if nvcc:
        binary = build_kernels(nvcc)
        if binary:
            return [str(binary)], f"examples/kernels.cu built with {nvcc}"
    if importlib.util.find_spec("torch") is not None:
        return [sys.executable, str(HERE / "torch_matmul_softmax.py")], "examples/torch_matmul_softmax.py (PyTorch)"
    from nsightwrap.watch import cudaprobe

    why = "no nvcc (CUDA toolkit) and no PyTorch here"
    return [sys.executable, cudaprobe.__file__], f"nsightwrap's one-kernel driver-API probe ({why})"


def kernel_table(report: str) -> str:
    from nsightwrap import load_report

    df = load_report(report)
    columns = [c for c in COLUMNS if c in df.columns]
    units = df.attrs.get("units", {})
    table = df[columns].rename(columns={c: f"{c} [{units[c]}]" for c in columns if units.get(c)})
    return table.to_string(index=False)


def main() -> int:
    command, what = workload()
    print(f"make run: profiling {what}", file=sys.stderr)
    report = BUILD.parent / "make-run" / "example"
    done = subprocess.run([sys.executable, "-m", "nsightwrap", "run", "--json", "--set", "basic", "-o", str(report),
                           "--", *command], stdout=subprocess.PIPE, text=True)
    try:
        attempt = json.loads(done.stdout)
    except ValueError:
        print(f"make run: nsightwrap printed no result (exit {done.returncode})", file=sys.stderr)
        return done.returncode or 1
    if attempt.get("status") != "ok":
        print(f"make run: {attempt.get('status')}: {attempt.get('reason') or attempt.get('error')}", file=sys.stderr)
        return done.returncode or 1
    print(f"\n{len(attempt['kernels'])} kernel launch(es) profiled; report {attempt['report']}\n")
    print(kernel_table(attempt["report"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

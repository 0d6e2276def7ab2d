"""One tiny CUDA kernel, launched through the driver API: the target of doctor's counter probe.

Needs nothing but the NVIDIA driver (libcuda.so.1, which ships with it): no
CUDA toolkit, no PyTorch. The kernel is PTX that the driver compiles for the
GPU it finds. Run as a plain script (`python cudaprobe.py`); it imports
nothing of nsightwrap, so the child needs no installed package.

Exit codes: 0 the kernel ran; 4 no driver library; 3 a CUDA call failed.
"""

from __future__ import annotations

import ctypes
import sys

KERNEL = "nsightwrap_probe"
PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry nsightwrap_probe()
{
    ret;
}
"""


def _check(cuda: ctypes.CDLL, name: str, *args: object) -> None:
    rc = getattr(cuda, name)(*args)
    if rc != 0:
        text = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(text))
        print(f"cudaprobe: {name} failed: {rc} {(text.value or b'').decode()}", flush=True)
        sys.exit(3)


def main() -> int:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"cudaprobe: no CUDA driver library here ({e}); install the NVIDIA driver", flush=True)
        return 4
    dev, ctx, module, func = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(cuda, "cuInit", 0)
    _check(cuda, "cuDeviceGet", ctypes.byref(dev), 0)
    _check(cuda, "cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    _check(cuda, "cuCtxSetCurrent", ctx)
    _check(cuda, "cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(PTX))
    _check(cuda, "cuModuleGetFunction", ctypes.byref(func), module, KERNEL.encode())
    _check(cuda, "cuLaunchKernel", func, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    _check(cuda, "cuCtxSynchronize")
    print(f"cudaprobe: {KERNEL} ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

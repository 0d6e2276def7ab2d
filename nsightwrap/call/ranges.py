"""Mark profiler ranges (cudaProfilerStart/Stop) and NVTX ranges from Python.

Range replay needs the program to mark what to profile, and profile(fn)
marks the measured calls so that warm-up kernels are never profiled. The
profiler API is the CUDA driver's cuProfilerStart/Stop through ctypes (no
framework needed); NVTX goes through torch or the `nvtx` package when one
is importable. NSIGHTWRAP_PROFILER_API=module:start:stop names other
functions to call instead (the tests use it for their fake CUDA).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional

PROFILER_API_VAR = "NSIGHTWRAP_PROFILER_API"


@dataclass(frozen=True)
class RangeAPI:
    """What start/stop/push/pop call here, and what was found (for logs)."""

    start: Callable[[], None]
    stop: Callable[[], None]
    push: Callable[[str], None]
    pop: Callable[[], None]
    describe: str


def _noop(*_a) -> None:
    return None


def _driver() -> Optional[ctypes.CDLL]:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _primary_context(lib: ctypes.CDLL) -> tuple[str, int]:
    """Make CUDA ready on this thread as the runtime does at its first call (cudaProfilerStart included): cuInit,
    then the primary context of device 0 (the runtime's default device, of those CUDA_VISIBLE_DEVICES shows)
    retained and made current. The runtime, and so PyTorch, CuPy and JAX, use that same context later; it stays
    retained for the process's life, as theirs does. Returns ("", 0) once done, else the call that failed and its
    CUDA error."""
    device, context = ctypes.c_int(0), ctypes.c_void_p()
    steps = (("cuInit", lambda: lib.cuInit(0)),
             ("cuDeviceGet", lambda: lib.cuDeviceGet(ctypes.byref(device), 0)),
             ("cuDevicePrimaryCtxRetain", lambda: lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)),
             ("cuCtxSetCurrent", lambda: lib.cuCtxSetCurrent(context)))
    for name, step in steps:
        rc = step()
        if rc != 0:
            return name, rc
    return "", 0


def _not_marked(fn_name: str, rc: int, after: str = "") -> RuntimeError:
    why = "CUDA is not initialized in this process" if rc == 3 else "no current CUDA context on this thread"
    return RuntimeError(f"{fn_name}: {why} (CUDA error {rc}){after}, so no profiler range could be marked; launch "
                        f"work on the GPU before the range (warmup >= 1), or set {PROFILER_API_VAR}=module:start:stop")


def _driver_calls(lib: ctypes.CDLL) -> tuple[Callable, Callable]:
    def call(fn_name: str) -> Callable[[], None]:
        fn = getattr(lib, fn_name)

        def run() -> None:
            if fn_name == "cuProfilerStop":
                lib.cuCtxSynchronize()  # the measured kernels belong inside the range
            rc = fn()
            if rc in (3, 201) and fn_name == "cuProfilerStart":
                # No CUDA call yet in this process (3), or no context on this thread (201): a range opened before
                # the program's first kernel (profile(fn, warmup=0)). Made ready as the runtime would, then again.
                failed, made = _primary_context(lib)
                if made != 0:
                    raise _not_marked(fn_name, rc, f", and making device 0's context current failed ({failed}: "
                                                   f"CUDA error {made})")
                rc = fn()
            if rc in (3, 201):
                raise _not_marked(fn_name, rc)
            if rc != 0:
                raise RuntimeError(f"{fn_name} failed with CUDA error {rc}")

        return run

    return call("cuProfilerStart"), call("cuProfilerStop")


def _framework_calls() -> Optional[tuple[Callable, Callable, str]]:
    """cudaProfilerStart/Stop through a framework already in use (the runtime API ncu documents)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                def stop() -> None:
                    torch.cuda.synchronize()
                    torch.cuda.profiler.stop()

                return torch.cuda.profiler.start, stop, "torch.cuda.profiler (cudaProfilerStart/Stop)"
        except Exception:  # noqa: BLE001 - a CPU-only torch: try the next
            pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            from cupy.cuda import profiler  # type: ignore

            def cstop() -> None:
                cupy.cuda.Device().synchronize()
                profiler.stop()

            return profiler.start, cstop, "cupy.cuda.profiler (cudaProfilerStart/Stop)"
        except Exception:  # noqa: BLE001
            pass
    return None


def _nvtx() -> tuple[Callable[[str], None], Callable[[], None], str]:
    if "torch" in sys.modules:
        try:
            import torch.cuda.nvtx as tnvtx

            return tnvtx.range_push, tnvtx.range_pop, "torch.cuda.nvtx"
        except Exception:  # noqa: BLE001 - a CPU-only torch has no NVTX; try the next
            pass
    try:
        import nvtx  # type: ignore

        return (lambda name: nvtx.push_range(name)), nvtx.pop_range, "nvtx"
    except Exception:  # noqa: BLE001
        return _noop, _noop, "no NVTX (install nvtx or torch to mark NVTX ranges)"


def find_range_api(environ: Optional[Mapping[str, str]] = None) -> RangeAPI:
    environ = os.environ if environ is None else environ
    push, pop, nvtx_desc = _nvtx()
    spec = environ.get(PROFILER_API_VAR)
    if spec:
        module, start, stop = spec.split(":")
        mod = importlib.import_module(module)
        return RangeAPI(getattr(mod, start), getattr(mod, stop), push, pop, f"{spec}; {nvtx_desc}")
    framework = _framework_calls()
    if framework is not None:
        start, stop, desc = framework
        return RangeAPI(start, stop, push, pop, f"{desc}; {nvtx_desc}")
    lib = _driver()
    if lib is None:
        return RangeAPI(_noop, _noop, push, pop, f"no CUDA driver: profiler ranges not marked; {nvtx_desc}")
    start, stop = _driver_calls(lib)
    return RangeAPI(start, stop, push, pop, f"cuProfilerStart/Stop; {nvtx_desc}")


@contextmanager
def range(name: str = "nsightwrap", *, api: Optional[RangeAPI] = None) -> Iterator[None]:  # noqa: A001
    """Mark a profiler range and an NVTX range around a block of code.

        with nsightwrap.range("step"):
            model(x)

    Under ncu with range replay (or profile-from-start off) only what runs
    inside is profiled; outside a profiler it costs next to nothing once
    CUDA is in use. Opened on a thread with no CUDA context (before the
    program's first CUDA call), the driver's range first makes device 0's
    primary context current, as the CUDA runtime would: it starts CUDA there
    (a context on that GPU), and the range is that context's, so work on
    another device is outside it (open the range after that device's first
    call).
    """
    api = api or find_range_api()
    api.push(name)
    try:
        api.start()
    except BaseException:
        api.pop()  # the NVTX range closes with the profiler range that did not open
        raise
    try:
        yield
    finally:
        api.stop()
        api.pop()

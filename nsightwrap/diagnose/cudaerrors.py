"""The CUDA error in a program's output, in the forms programs print it.

Pure text in, a :class:`CudaError` out (None when the output names none).
The forms: the runtime's and driver's messages ("an illegal memory access
was encountered", "misaligned address", "unspecified launch failure", ...),
PyTorch's ``RuntimeError: CUDA error: ...``, CuPy's ``CUDARuntimeError:
cudaErrorIllegalAddress: ...``, Triton's ``Triton Error [CUDA]: ...``, the
runtime's enum names (``cudaErrorMisalignedAddress``) and the driver's
(``CUDA_ERROR_LAUNCH_FAILED``). Each known error is one row of
:data:`KNOWN`: runtime name, driver name, code, message, and whether it is
*asynchronous* (a fault inside a kernel: it surfaces at a later API call
than the launch that caused it, so CUDA_LAUNCH_BLOCKING=1 finds the kernel).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

__all__ = ["KNOWN", "CudaError", "find_cuda_error"]


@dataclass(frozen=True)
class _Known:
    runtime: str
    driver: str
    code: int
    message: str
    asynchronous: bool


#: The common CUDA errors (cuda_runtime_api.h's cudaError, cuda.h's CUresult, their cudaGetErrorString).
KNOWN: tuple[_Known, ...] = (
    _Known("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", 700,
           "an illegal memory access was encountered", True),
    _Known("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", 716, "misaligned address", True),
    _Known("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", 719, "unspecified launch failure", True),
    _Known("cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", 715,
           "an illegal instruction was encountered", True),
    _Known("cudaErrorAssert", "CUDA_ERROR_ASSERT", 710, "device-side assert triggered", True),
    _Known("cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT", 702,
           "the launch timed out and was terminated", True),
    _Known("cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", 714, "hardware stack error", True),
    _Known("cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", 718, "invalid program counter", True),
    _Known("cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE", 717,
           "operation not supported on global/shared address space", True),
    _Known("cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE", 214,
           "uncorrectable ECC error encountered", True),
    _Known("cudaErrorLaunchOutOfResources", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 701,
           "too many resources requested for launch", False),
    _Known("cudaErrorInvalidConfiguration", "", 9, "invalid configuration argument", False),  # driver: none of its own
    _Known("cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU", 209,
           "no kernel image is available for execution on the device", False),
    _Known("cudaErrorInvalidDeviceFunction", "", 98, "invalid device function", False),  # driver: none of its own
    _Known("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", 2, "out of memory", False),
    _Known("cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", 1, "invalid argument", False),
    _Known("cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE", 400, "invalid resource handle", False),
)

#: A driver name maps to the one runtime error that is really it; "" where the runtime error has no driver
#: name of its own (the driver reports a bad launch configuration as CUDA_ERROR_INVALID_VALUE, i.e. 1).
_BY_NAME = {k.runtime: k for k in KNOWN} | {k.driver: k for k in KNOWN if k.driver}
_RUNTIME_NAME = re.compile(r"\bcudaError[A-Z][A-Za-z]*\b")
_DRIVER_NAME = re.compile(r"\bCUDA_ERROR_[A-Z_]+\b")
#: "CUDA error: X", "CUDA Error: X", "Triton Error [CUDA]: X", "cudaErrorX: X" (CuPy).
_PREFIXED = re.compile(r"(?:CUDA [Ee]rror|Triton Error \[CUDA\]|cudaError[A-Za-z]+)\s*:\s*([^\n]+)")
_SOURCE = re.compile(r"([\w./-]+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|py)):(\d+)")
#: PyTorch's and CUDA's own hint that the error was reported later than it happened.
_ASYNC_HINTS = ("asynchronously reported", "CUDA_LAUNCH_BLOCKING")


@dataclass(frozen=True)
class CudaError:
    """One CUDA error as a program printed it.

    name: the runtime's enum name (``cudaErrorIllegalAddress``), or the
    driver's when only that was printed and it is not known here; message:
    cudaGetErrorString's text; code: the number, when known; asynchronous:
    a fault inside a kernel (surfaces at a later API call); line: the output
    line it was found in; source: ``FILE:LINE`` printed on that line, if any.
    """

    name: str
    message: str
    code: Optional[int]
    asynchronous: bool
    line: str
    source: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.name} ({self.message})" if self.message and self.message != self.name else self.name


def _from_known(k: _Known, line: str) -> CudaError:
    m = _SOURCE.search(line)
    return CudaError(k.runtime, k.message, k.code, k.asynchronous, line.strip()[:300],
                     f"{m.group(1)}:{m.group(2)}" if m else None)


def _in_line(line: str) -> Optional[CudaError]:
    """The error one line names: an enum name first, then a known message, then any "CUDA error: X"."""
    for pattern in (_RUNTIME_NAME, _DRIVER_NAME):
        for m in pattern.finditer(line):
            if m.group(0) in _BY_NAME:
                return _from_known(_BY_NAME[m.group(0)], line)
    lowered = line.lower()
    for k in KNOWN:
        if k.message in lowered:
            return _from_known(k, line)
    for pattern in (_RUNTIME_NAME, _DRIVER_NAME):
        m = pattern.search(line)
        if m:
            return CudaError(m.group(0), m.group(0), None, False, line.strip()[:300])
    m = _PREFIXED.search(line)
    if m:
        return CudaError("CUDA error", m.group(1).strip()[:200], None, False, line.strip()[:300])
    return None


def find_cuda_error(output: str) -> Optional[CudaError]:
    """The first CUDA error `output` names, or None. A PyTorch hint that errors are reported asynchronously
    marks it asynchronous even when its kind alone would not."""
    for line in output.splitlines():
        if "cuda" not in line.lower() and not any(k.message in line.lower() for k in KNOWN[:10]):
            continue
        found = _in_line(line)
        if found is not None:
            if not found.asynchronous and any(h in output for h in _ASYNC_HINTS):
                found = CudaError(found.name, found.message, found.code, True, found.line, found.source)
            return found
    return None

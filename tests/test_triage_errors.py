"""Triage reads the CUDA error a program printed, in the forms programs print it (issue 21)."""

from __future__ import annotations

import pytest

from nsightwrap.diagnose.cudaerrors import find_cuda_error

CASES = [
    # (output, name, asynchronous)
    ("CUDA error at main.cu:42: an illegal memory access was encountered", "cudaErrorIllegalAddress", True),
    ("kernel.cu:57: misaligned address", "cudaErrorMisalignedAddress", True),
    ("step 900: unspecified launch failure", "cudaErrorLaunchFailure", True),
    ("Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error: an illegal memory access was "
     "encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
     "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1",
     "cudaErrorIllegalAddress", True),
    ("cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMisalignedAddress: misaligned address",
     "cudaErrorMisalignedAddress", True),
    ("numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS",
     "cudaErrorIllegalAddress", True),
    ("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED", "cudaErrorLaunchFailure", True),
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "cudaErrorIllegalAddress",
     True),
    ("x.cu:9: block: [0,0,0], thread: [3,0,0] Assertion `i < n` failed.\nCUDA error: device-side assert triggered",
     "cudaErrorAssert", True),
    ("CUDA error: out of memory (cudaErrorMemoryAllocation)", "cudaErrorMemoryAllocation", False),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cudaErrorMemoryAllocation", False),
    ("error: cudaErrorNoKernelImageForDevice", "cudaErrorNoKernelImageForDevice", False),
    ("got CUDA_ERROR_SOMETHING_NEW from the driver", "CUDA_ERROR_SOMETHING_NEW", False),
]


@pytest.mark.parametrize("output,name,asynchronous", CASES)
def test_the_common_forms_of_a_cuda_error_are_read(output, name, asynchronous):
    found = find_cuda_error("loading data\n" + output + "\n")
    assert found is not None and found.name == name and found.asynchronous is asynchronous


def test_the_source_line_printed_beside_the_error_is_kept():
    found = find_cuda_error("CUDA error at attn.cu:88: misaligned address\n")
    assert found.source == "attn.cu:88" and found.code == 716 and "misaligned" in str(found)


@pytest.mark.parametrize("output", ["", "all done, 0 errors\n", "loss 0.31 cuda:0\n", "invalid argument --foo\n"])
def test_output_without_a_cuda_error_names_none(output):
    assert find_cuda_error(output) is None

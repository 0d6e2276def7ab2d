"""Triage's review fixes (batch B): cancelled sanitizer runs, sanitizer limits, up-front checks, programs that
cannot be executed, the verdict's words per tool, the CUDA error names, the kernel the sanitizers named."""

from __future__ import annotations

import pytest

from nsightwrap.diagnose.cudaerrors import find_cuda_error


@pytest.mark.parametrize("output,name", [
    ("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE", "cudaErrorInvalidValue"),
    ("cuStreamSynchronize: CUDA_ERROR_INVALID_HANDLE", "cudaErrorInvalidResourceHandle"),
    ("CUDA error: invalid configuration argument", "cudaErrorInvalidConfiguration"),
    ("CUDA error: invalid device function", "cudaErrorInvalidDeviceFunction"),
])
def test_a_driver_name_maps_only_to_the_runtime_error_it_really_is(output, name):
    assert find_cuda_error(output + "\n").name == name

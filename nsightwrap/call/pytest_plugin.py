"""pytest fixture `nsight_profile`: profile a callable inside a test.

Registered through the `pytest11` entry point, so any project with
nsightwrap installed can write

    def test_softmax_profile(nsight_profile):
        result = nsight_profile(softmax_step, 4096, kernel="softmax", set="basic")
        assert not result.hung

The fixture skips the test cleanly where there is no ncu, or (with the real
ncu) no GPU. Imports stay lazy: loading the plugin costs nothing.
"""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def nsight_profile():
    """nsightwrap.profile, or a skip when nothing could be profiled here."""
    from nsightwrap.errors import ToolNotFound
    from nsightwrap.ncu.locate import find_ncu

    try:
        find_ncu()
    except ToolNotFound as e:
        pytest.skip("nsightwrap: " + str(e).splitlines()[0] + " (set NSIGHTWRAP_NCU or install Nsight Compute)")
    import os

    if not os.environ.get("NSIGHTWRAP_NCU") and shutil.which("nvidia-smi") is None:
        pytest.skip("nsightwrap: no NVIDIA driver (nvidia-smi not found)")
    from nsightwrap.call.api import profile

    return profile

"""pytest fixture `nsight_profile`: profile a callable inside a test.

Registered through the `pytest11` entry point, so any project with
nsightwrap installed can write

    def test_softmax_profile(nsight_profile):
        result = nsight_profile(softmax_step, 4096, kernel="softmax", set="basic")
        assert not result.hung

The fixture skips the test cleanly where there is no ncu or no GPU (nvidia-smi
lists none), whatever NSIGHTWRAP_NCU says. pandas loads only when the fixture is used.
"""

from __future__ import annotations

from typing import Callable

import pytest

from nsightwrap.errors import ToolNotFound
from nsightwrap.ncu.locate import ENV_NCU, find_ncu
from nsightwrap.watch import gpu


@pytest.fixture
def nsight_profile() -> Callable:
    """nsightwrap.profile, or a skip when nothing could be profiled here."""
    try:
        find_ncu()
    except ToolNotFound as e:
        pytest.skip("nsightwrap: " + str(e).splitlines()[0] + f" (set {ENV_NCU} or install Nsight Compute)")
    if not gpu.gpu_count():
        # Even with NSIGHTWRAP_NCU set: an ncu without a GPU can profile nothing.
        pytest.skip("nsightwrap: no NVIDIA GPU here (nvidia-smi not found or lists none)")
    # Lazy on purpose: call.api imports pandas, and the plugin loads in every pytest session.
    from nsightwrap.call.api import profile

    return profile

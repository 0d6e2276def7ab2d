"""What a test needs of the machine is said in one place: the gpu marker's requirements (tests/conftest.py), and
helpers.unavailable for the rest (a skip on a developer's machine, a failure in CI, NSIGHTWRAP_TEST_STRICT=1)."""

from __future__ import annotations

import pytest
from conftest import _gpu_needs
from helpers import STRICT_VAR, unavailable


class Item:
    def __init__(self, *markers):
        self.markers = markers

    def iter_markers(self, name):
        return [m for m in self.markers if m.name == name]


def test_the_gpu_marker_names_what_is_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    two = Item(pytest.mark.gpu.mark, pytest.mark.gpu(gpus=2).mark)
    assert _gpu_needs(two, 2) is None and "needs 2 GPUs, this machine has 1" in _gpu_needs(two, 1)
    built = Item(pytest.mark.gpu(tools=("nvcc",)).mark)
    if not __import__("os").path.exists("/usr/local/cuda/bin/nvcc"):
        assert "nvcc not found" in _gpu_needs(built, 1)
    assert _gpu_needs(Item(pytest.mark.gpu.mark), 1) is None


def test_an_unavailable_need_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv(STRICT_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no server"):
        unavailable("no server")
    monkeypatch.setenv(STRICT_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match="no server"):
        unavailable("no server")

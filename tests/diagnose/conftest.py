"""Fixtures of the triage tests (nsightwrap/diagnose)."""

import os

import pytest


@pytest.fixture
def env(tmp_path, monkeypatch):
    """The fake tracer (any file as the library), a run counter (absent until a run is made), a seed; the fake
    sanitizer's fast clock; no CUDA_LAUNCH_BLOCKING from outside."""
    lib = tmp_path / "libfake_tracer.so"
    lib.write_text("")
    monkeypatch.setenv("NSIGHTWRAP_TRACER", str(lib))
    monkeypatch.setenv("FAKE_TRIAGE_COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("FAKE_TRIAGE_SEED", "11")
    monkeypatch.setenv("FAKE_SAN_SCALE", "0.1")
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    return dict(os.environ)

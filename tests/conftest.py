"""Shared fixtures: the fake ncu, fake programs, and the gpu marker's skip (helpers: tests/helpers.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers import DATA, FAKE_APP, FAKE_DIR, FAKE_NCU, FAKE_SCALE, HERE, app, attempt_rows

# Older tests import these from conftest; new ones import from helpers.
__all__ = ["DATA", "FAKE_APP", "FAKE_DIR", "FAKE_NCU", "FAKE_SCALE", "HERE", "app"]


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory):
    """One probe cache for the session: probing the fake ncu starts it three times (0.2 s), and its answer never
    changes. Tests of the cache itself use their own folder."""
    return tmp_path_factory.mktemp("ncu-probe-cache")


@pytest.fixture
def fake_env(tmp_path, monkeypatch, probe_cache):
    """Environment in which nsightwrap finds the fake ncu (probed once per session)."""
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(FAKE_NCU))
    monkeypatch.setenv("NSIGHTWRAP_CACHE_DIR", str(probe_cache))
    monkeypatch.setenv("FAKE_NCU_SCALE", FAKE_SCALE)
    monkeypatch.delenv("FAKE_NCU_WEDGED", raising=False)
    monkeypatch.setenv("NSIGHTWRAP_TRACER", "off")  # the tests of the CUPTI tracer give their fake one
    return dict(os.environ)


def _gpu_available() -> str | None:
    """None when a GPU and ncu are usable, else why not."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "no NVIDIA driver (nvidia-smi not found)"
    try:
        if subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode != 0:
            return "nvidia-smi -L failed: no usable GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi did not answer"
    from nsightwrap.errors import ToolNotFound
    from nsightwrap.ncu.locate import find_ncu

    try:
        find_ncu(env={k: v for k, v in os.environ.items() if k != "NSIGHTWRAP_NCU"})
    except ToolNotFound:
        return "ncu not found"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    why = _gpu_available()
    if why:
        skip = pytest.mark.skip(reason=f"gpu test: {why}")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def ncu_lookups(monkeypatch):
    """Counts how often ncu is located and probed (every run context does both through nsightwrap.ncu.context)."""
    import nsightwrap.ncu.context as context

    counts = {"find_ncu": 0, "probe_ncu": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(context, "find_ncu", counted("find_ncu", context.find_ncu))
    monkeypatch.setattr(context, "probe_ncu", counted("probe_ncu", context.probe_ncu))
    return counts


@pytest.fixture
def store(tmp_path):
    """A hang store of this test, closed after it."""
    from nsightwrap.store.hangstore import HangStore

    with HangStore(tmp_path / "hangs.db") as s:
        yield s


@pytest.fixture
def fake_rows(monkeypatch):
    """Walks take their rows from the attempts: the fake's reports are copies of real ones, not the program's."""
    import nsightwrap.fallback.walk

    monkeypatch.setattr(nsightwrap.fallback.walk, "report_rows", attempt_rows)

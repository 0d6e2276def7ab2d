"""The wrapper trace behind find_report_module (`sh -x ncu --version`, a run of ncu itself) is cached across
processes in the per-user tool cache, keyed by the script's path, size and mtime (issue 19: every walk read a
report and paid one ncu start for it on the GPU machine, whose CUDA 13 bin/ncu names no install)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsightwrap.reports.ncu import find_report_module
from nsightwrap.reports.ncu import module as report_module


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "tools"
    monkeypatch.setenv("NSIGHTWRAP_CACHE_DIR", str(folder))
    report_module._traced_targets.cache_clear()
    yield folder
    report_module._traced_targets.cache_clear()


def computed_wrapper(root: Path) -> tuple[Path, Path, Path]:
    """A CUDA 13-like bin/ncu that picks the newest install at run time and counts its runs; the install's
    ncu and extras module; the count file."""
    install = root / "opt" / "nsight-compute" / "2025.3.1"
    (install / "extras" / "python").mkdir(parents=True)
    module = install / "extras" / "python" / "ncu_report.py"
    module.write_text("")
    (install / "ncu").write_text("#!/bin/sh\nexit 0\n")
    (install / "ncu").chmod(0o755)
    runs = root / "runs"
    wrapper = root / "cuda" / "bin" / "ncu"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\necho run >> "{runs}"\n'
                       f'for d in "{root}"/opt/nsight-compute/*; do T="$d"; done\nexec "$T/ncu" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, module, runs


def traced(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_the_trace_of_a_wrapper_is_cached_across_processes(tmp_path, cache):
    wrapper, module, runs = computed_wrapper(tmp_path)
    assert find_report_module(wrapper) == module and traced(runs) == 1
    report_module._traced_targets.cache_clear()  # as a new process would start
    assert find_report_module(wrapper) == module and traced(runs) == 1  # from the tool cache, ncu not run
    assert [f.name.startswith("ncu-wrapper-") for f in cache.iterdir()] == [True]


def test_a_changed_wrapper_or_a_new_install_is_traced_again(tmp_path, cache):
    wrapper, module, runs = computed_wrapper(tmp_path)
    assert find_report_module(wrapper) == module and traced(runs) == 1
    newer = tmp_path / "opt" / "nsight-compute" / "2026.1.0"  # the wrapper now picks this one
    (newer / "extras" / "python").mkdir(parents=True)
    (newer / "extras" / "python" / "ncu_report.py").write_text("")
    (newer / "ncu").write_text("#!/bin/sh\nexit 0\n")
    (newer / "ncu").chmod(0o755)
    report_module._traced_targets.cache_clear()
    assert find_report_module(wrapper) == newer / "extras" / "python" / "ncu_report.py" and traced(runs) == 2
    wrapper.write_text(wrapper.read_text() + "# edited\n")
    report_module._traced_targets.cache_clear()
    find_report_module(wrapper)
    assert traced(runs) == 3


def test_a_bad_cache_file_is_traced_again(tmp_path, cache):
    wrapper, module, runs = computed_wrapper(tmp_path)
    find_report_module(wrapper)
    for f in cache.iterdir():
        f.write_text("{not json")
    report_module._traced_targets.cache_clear()
    assert find_report_module(wrapper) == module and traced(runs) == 2

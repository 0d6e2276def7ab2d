"""`hangs bundle`'s versions find compute-sanitizer as triage does (diagnose.sanitizer.find_sanitizer)."""

from __future__ import annotations

import os

from helpers import FAKE_SANITIZER

from nsightwrap.cli.versions import _sanitizer
from nsightwrap.diagnose.run import TriageOptions
from nsightwrap.diagnose.sanitizer import TOOLS, find_sanitizer


def test_the_versions_find_compute_sanitizer_where_triage_does(tmp_path):
    assert _sanitizer({"PATH": "", "NSIGHTWRAP_SANITIZER": str(FAKE_SANITIZER)}, None) == str(FAKE_SANITIZER)
    (tmp_path / "ncu").write_text("")
    os.symlink(FAKE_SANITIZER, tmp_path / "compute-sanitizer")
    ncu = str(tmp_path / "ncu")
    found = _sanitizer({"PATH": ""}, ncu)
    assert found is not None and found == find_sanitizer(None, {"PATH": ""}, ncu=ncu)  # as triage looks
    no_toolkit = tmp_path / "no-cuda"
    no_toolkit.mkdir()  # beside the ncu found, where the CUDA toolkit has none (on the GPU machine its own comes first)
    beside = find_sanitizer(None, {"PATH": ""}, ncu=ncu, cuda_root=str(no_toolkit))
    assert os.path.dirname(beside) == str(tmp_path)
    if not os.path.exists("/usr/local/cuda"):  # CI's machine: the versions find that one too
        assert found == beside


def test_triage_knows_the_tools_the_sanitizer_module_knows():
    assert TriageOptions().tools is TOOLS  # one list: the sanitizer module's

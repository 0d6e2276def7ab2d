"""`hangs bundle`'s versions find compute-sanitizer as triage does (diagnose.sanitizer.find_sanitizer)."""

from __future__ import annotations

import os

from helpers import FAKE_SANITIZER

from nsightwrap.cli.versions import _sanitizer
from nsightwrap.diagnose.run import TriageOptions
from nsightwrap.diagnose.sanitizer import TOOLS


def test_the_versions_find_compute_sanitizer_where_triage_does(tmp_path):
    assert _sanitizer({"PATH": "", "NSIGHTWRAP_SANITIZER": str(FAKE_SANITIZER)}, None) == str(FAKE_SANITIZER)
    (tmp_path / "ncu").write_text("")
    os.symlink(FAKE_SANITIZER, tmp_path / "compute-sanitizer")
    found = _sanitizer({"PATH": ""}, str(tmp_path / "ncu"))  # beside the ncu found, as triage looks
    default = _sanitizer({"PATH": ""}, None)  # the CUDA toolkit's (the GPU machine's), before the ncu's folder
    assert default is None or os.path.exists("/usr/local/cuda")
    assert found is not None and os.path.dirname(found) == (os.path.dirname(default) if default else str(tmp_path))


def test_triage_knows_the_tools_the_sanitizer_module_knows():
    assert TriageOptions().tools is TOOLS  # one list: the sanitizer module's

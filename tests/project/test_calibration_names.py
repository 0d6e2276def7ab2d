"""One word per thing in calibration: Calibration (a program's times without ncu), Calibrator (who finds and
uses them), CallTimes (profile(fn)'s call times), calibration_sql (the store's table); no look-alikes left."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import nsightwrap

PACKAGE = Path(nsightwrap.__file__).parent


def test_no_look_alike_names_are_left():
    assert not list(PACKAGE.rglob("calibrations.py"))
    with pytest.raises(ImportError):
        importlib.import_module("nsightwrap.store.calibrations")
    call = importlib.import_module("nsightwrap.call.calibration")
    assert not hasattr(call, "Calibrations") and hasattr(call, "CallTimes")
    texts = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    assert "Calibrations(" not in texts and "class Calibrations" not in texts

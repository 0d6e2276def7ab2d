"""Calibrator.learn (FIX2): a calibration measured elsewhere (an engine's job on its node) taken as the
calibrator's own, so known() and apply() give it as if it had been measured here."""

from __future__ import annotations

from helpers import FakeContext, run_config

from nsightwrap.calibrate import Calibrator
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.status import TIMEOUT

FULL = Calibration.from_kernels({"k": 0.5}, program_s=2.0, marks_ranges=False)
PARTIAL = Calibration.from_kernels({"k": 0.5})  # stopped early: bounds only the kernels it saw


class _NoStore:
    """A store source that must not be asked: the learnt calibration stands without a look-up."""

    def __call__(self):
        raise AssertionError("the store was looked up although a calibration was learnt")


def test_a_learnt_calibration_is_known_and_applied_without_a_store_look_up(tmp_path):
    calibrator = Calibrator(["app"], store=_NoStore())
    assert calibrator.learn(FULL)
    assert calibrator.known() is FULL and calibrator.measured == 0
    context = calibrator.apply(_context(tmp_path))
    assert context.config.calibration is FULL


def test_only_a_usable_calibration_is_learnt_and_never_over_a_full_one():
    calibrator = Calibrator(["app"], store=None)
    assert not calibrator.learn(None)
    assert not calibrator.learn(Calibration.failed(TIMEOUT, "the program hangs by itself", "nsys"))
    assert calibrator.known() is None
    assert calibrator.learn(PARTIAL) and calibrator.known() is PARTIAL
    assert calibrator.learn(FULL) and calibrator.known() is FULL  # a full run replaces a partial one
    assert not calibrator.learn(PARTIAL) and calibrator.known() is FULL


def test_a_lazy_calibrator_applies_what_it_learnt(tmp_path):
    calibrator = Calibrator(["app"], store=None, lazy=True)
    calibrator.learn(FULL)
    assert calibrator.apply(_context(tmp_path)).config.calibration is FULL


def _context(tmp_path):
    return FakeContext(run_config(tmp_path))

"""Functions that the profile(fn) tests hand to the child, which imports them by name.

A light module on purpose: the child imports only this and the fake
injection library (fakecuda), not a test module with pytest and pandas
(0.4 s less per child process).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_ncu"))
import fakecuda  # noqa: E402


def matmul_softmax(n, tag="x"):
    fakecuda.launch("gemm_kernel")
    fakecuda.launch("softmax_kernel")
    return {"n": n, "tag": tag}


def step_with_hang(n):
    fakecuda.launch("vec_add")
    fakecuda.launch("wait_for_host", hang=True)
    fakecuda.launch("vec_add")
    return n


def raises(n):
    raise ValueError(f"bad n={n}")


def returns_unpicklable():
    fakecuda.launch("k")
    return lambda: None


def quick_step(n):
    fakecuda.launch("softmax_kernel")
    return n


def other_step(n):
    fakecuda.launch("gemm_kernel")
    return n + 1


def slow_step(call_s, gap_s):
    """A call of `call_s` seconds whose kernel, profiled, is silent `gap_s` between its two progress marks."""
    time.sleep(call_s)
    fakecuda.launch("slow_kernel", slow=gap_s, gaps=1)
    return "done"


def touches(path):
    Path(path).write_text("fn ran")
    fakecuda.launch("k")

"""Kernel names are parsed in one place, nsightwrap.ncu.names: ncu's, nsys's and the tracer's spellings."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import nsightwrap
from nsightwrap.ncu.known import collective_family
from nsightwrap.ncu.names import core_matches, cut_short, function_core, normalize_kernel, same_kernel, uncut
from nsightwrap.reports.ncu import parse_raw_csv

PACKAGE = Path(nsightwrap.__file__).parent  # wherever the tests folder puts this file
#: What taking a kernel's name apart looks like; only nsightwrap/ncu/names.py may do it.
PARSING = re.compile(r"""endswith\(\s*["']\.\.\.["']|\(anonymous namespace\)|def _?\w*demangled?\w*\(""")


@pytest.mark.parametrize("demangled,function", [
    ("vec_add(const float *, const float *, float *, int)", "vec_add"),
    ("vec_add", "vec_add"),
    ("void ns::kern<int, (int)4>(float *, void (*)(int))", "kern"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)",
     "vectorized_elementwise_kernel"),
    ("void ns::outer<int>::kern(float *)", "kern"),
    ("void at::native::(anonymous namespace)::softmax_warp<float, 4>(float *)", "softmax_warp"),
])
def test_function_core_is_what_ncus_function_base_shows(demangled, function):
    assert function_core(demangled) == function


def test_a_reports_function_column_is_the_demangled_names_core():
    header = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n'  # ncu's CSV: the name demangled
    rows = '"0","void ns::kern<int, 4>(float *)","1"\n"1","(...)","2"\n'
    df = parse_raw_csv(header + rows)
    assert df["function"].tolist() == ["kern", "(...)"]  # a name with no core keeps its text


@pytest.mark.parametrize("name", ["ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                  "void ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096UL>)",
                                  "ncclDevKernel_AllReduce_Sum_f...", "  ncclDevKernel_Generic  "])
def test_a_collective_is_known_in_every_spelling(name):
    assert collective_family(name) == "nccl"


def test_other_kernels_are_no_collective():
    assert collective_family("void gemm<nccl_like>(int)") is None
    assert collective_family("") is None and collective_family(None) is None


def test_a_name_cut_short():
    assert cut_short("ncclDevKernel_AllReduce_Sum_f...") and cut_short("k... ")
    assert not cut_short("vec_add") and not cut_short("void f(...)x")
    assert uncut(" ncclDevKernel_AllReduce_Sum_f... ") == "ncclDevKernel_AllReduce_Sum_f" and uncut("k") == "k"
    assert core_matches("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_AllReduce_Sum_f...")
    assert same_kernel("void ncclDevKernel_AllReduce_Sum_f32_RING_LL(int)", "ncclDevKernel_AllReduce_Sum_f...")


def test_normalize_kernel_has_one_home():
    assert nsightwrap.normalize_kernel is normalize_kernel
    assert normalize_kernel("void nvjet_sm90_tst_256x128_64x4_1<int>(float *)") == "nvjet_sm#_tst_#x#_#x#_#"
    for module in ("nsightwrap.store", "nsightwrap.store.keys"):
        assert not hasattr(importlib.import_module(module), "normalize_kernel"), module


def test_only_names_py_takes_kernel_names_apart():
    offenders = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
                 for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "ncu" / "names.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if PARSING.search(line)]
    assert offenders == [], "parse kernel names with nsightwrap.ncu.names"


def test_the_debug_log_selects_a_cut_name_by_its_start(tmp_path):
    from nsightwrap.store.debuglog import debug_log
    from nsightwrap.store.hangstore import HangStore

    with HangStore(tmp_path / "hangs.db") as store:
        assert "--kernel '^nvjet_sm90_tst_256' --set basic" in debug_log(store, " nvjet_sm90_tst_256... ")
        assert "--kernel-name vec_add --set basic" in debug_log(store, "vec_add")

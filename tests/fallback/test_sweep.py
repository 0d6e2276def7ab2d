"""sweep-sections: group testing finds exactly the planted culprits."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from helpers import DATA, STALL_S, app, cli_main, run_config

from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import investigate, sweep_sections
from nsightwrap.fallback.sweepresult import Probe
from nsightwrap.ncu.catalog import parse_table
from nsightwrap.ncu.context import RunConfig

FULL = [s.strip() for row in parse_table((DATA / "ncu/list_sets.txt").read_text()) if row["Identifier"] == "full"
        for s in row["Sections"].split(",")]


def oracle(culprits, calls=None):
    def run(kernel, sections):
        if calls is not None:
            calls.append(sections)
        hung = any(set(c) <= sections for c in culprits)
        return Probe(kernel, sections, "hang" if hung else "ok", 0.0)
    return run


def found(r):
    return sorted([(s,) for s in r.singles] + [tuple(sorted(c)) for c in r.combinations])


@pytest.mark.parametrize("culprit", FULL)
def test_every_single_culprit_within_the_goal(culprit):
    r = investigate("k", FULL, oracle([(culprit,)]))
    assert found(r) == [(culprit,)]
    assert r.probes_run <= 1 * math.ceil(math.log2(len(FULL))) + 2
    assert culprit not in r.largest_working and len(r.largest_working) == len(FULL) - 1


def test_every_pair_and_every_two_singles():
    worst = 0
    for a, b in itertools.combinations(FULL, 2):
        for culprits in ([(a, b)], [(a,), (b,)]):
            r = investigate("k", FULL, oracle(culprits))
            assert found(r) == sorted(tuple(sorted(c)) for c in culprits), culprits
            worst = max(worst, r.probes_run - r.budget())
            assert set(r.largest_working) == set(FULL) - {a, b} or (
                len(culprits) == 1 and len(r.largest_working) == len(FULL) - 1)
    # Each culprit after the first costs two probes more than the goal's ceil(log2 S): the probe that
    # tells "alone" from "together" and the probe that the rest still hangs (see investigate()).
    assert worst <= 2


def test_no_culprit_and_combinations_of_three():
    r = investigate("k", FULL, oracle([]), known_hang=False)
    assert found(r) == [] and r.probes_run == 1 and len(r.largest_working) == len(FULL)
    r = investigate("k", FULL, oracle([("A1", "B2", "C3")]), known_hang=True)  # not among the sections: nothing hangs
    assert r.largest_working
    trio = FULL[2], FULL[9], FULL[15]
    r = investigate("k", FULL, oracle([trio]))
    assert found(r) == [tuple(sorted(trio))]


def test_the_table_shows_every_section_of_a_probe():
    from nsightwrap.fallback.sweepresult import KernelSweep, SweepResult, wrap_sections

    probe = Probe("k", frozenset(FULL), "hang", 3.0, 38)
    table = SweepResult(tuple(FULL), [KernelSweep("k", tuple(FULL), probes=[probe])]).table()
    label = probe.label()
    assert len(label) > 60
    rows = [line[33:93].rstrip() for line in table.splitlines()[1:len(wrap_sections(label)) + 1]]
    assert "".join(rows) == label  # wrapped after a `+`, nothing cut
    assert all(len(r) <= 60 for r in rows) and all(r.endswith("+") for r in rows[:-1])


def test_the_table_says_what_is_unresolved_for_every_kernel():
    # It said only the last kernel's (a loop variable read after its loop).
    from nsightwrap.fallback.sweepresult import KernelSweep, SweepResult

    kernels = [KernelSweep("k1", tuple(FULL), unresolved=["A hangs only with more than 2 others among B+C"]),
               KernelSweep("k2", tuple(FULL)),
               KernelSweep("k3", tuple(FULL), unresolved=["D hangs only with more than 2 others among E+F"])]
    lines = SweepResult(tuple(FULL), kernels).table().splitlines()
    unresolved = [i for i, line in enumerate(lines) if line.startswith("  unresolved: ")]
    assert [lines[i] for i in unresolved] == ["  unresolved: A hangs only with more than 2 others among B+C",
                                              "  unresolved: D hangs only with more than 2 others among E+F"]
    assert [lines[i - 1].split(":")[0] for i in unresolved] == ["k1", "k3"]  # under its kernel's line


# --- with the fake ncu, real processes ------------------------------------------------

SMALL = ["LaunchStats", "Occupancy", "SourceCounters", "SpeedOfLight", "WarpStateStats", "WorkloadDistribution",
         "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis"]


@pytest.fixture
def cfg(tmp_path, fake_env) -> RunConfig:
    return run_config(tmp_path, report_dir=str(tmp_path), env=fake_env, stall_timeout_given=True)


def test_a_callers_calibrator_uses_the_sweeps_environment(tmp_path, fake_env, store, monkeypatch):
    """The sweep detects this machine once (nvidia-smi) and hands it to the caller's Calibrator."""
    from nsightwrap.calibrate.confirm import Calibrator
    from nsightwrap.store.keys import Environment

    detected = []
    real_detect = Environment.detect
    monkeypatch.setattr(Environment, "detect", classmethod(
        lambda cls, *a, **k: detected.append(1) or real_detect(*a, **k)))
    config = run_config(tmp_path, report_dir=str(tmp_path), env=fake_env)  # calibrated allowances
    calibrator = Calibrator(app("vec_add"), store=store)
    r = sweep_sections(Session.open(app("vec_add"), config, store=store, calibrator=calibrator), sections=SMALL)
    assert r.clean and calibrator._looked_up and len(detected) == 1


PLANTS = [("SourceCounters", ["SourceCounters"], []),
          ("SourceCounters|WarpStateStats", ["SourceCounters", "WarpStateStats"], []),
          ("Occupancy+MemoryWorkloadAnalysis", [], [("MemoryWorkloadAnalysis", "Occupancy")])]


@pytest.mark.parametrize("plant,expect_singles,expect_pairs", PLANTS)
def test_the_fakes_plants_are_found_among_the_small_sections(plant, expect_singles, expect_pairs):
    """The search of test_sweep_with_fake_ncu on each plant of the fake's `hang-if=` (A|B: either, A+B: both),
    with an oracle for the probes; the pair runs end to end below (among four of them: PAIRED)."""
    r = investigate("k", SMALL, oracle([tuple(alt.split("+")) for alt in plant.split("|")]))
    assert sorted(r.singles) == expect_singles and r.combinations == expect_pairs
    assert r.probes_run <= r.budget() + 1


#: The pair's sections and two others: the search end to end in 6 probes, not the 8 of SMALL's (each a run of the fake
#: ncu); the search itself among more sections is the oracle tests' above.
PAIRED = ["LaunchStats", "Occupancy", "SpeedOfLight", "MemoryWorkloadAnalysis"]


@pytest.mark.parametrize("plant,expect_singles,expect_pairs", PLANTS[2:])
def test_sweep_with_fake_ncu(cfg, store, plant, expect_singles, expect_pairs, ncu_lookups):
    command = app("vec_add", f"k@hang-if={plant}", "block_reduce")
    r = sweep_sections(Session.open(command, cfg, store=store), sections=PAIRED)
    assert ncu_lookups == {"find_ncu": 1, "probe_ncu": 1}  # one run context for every probe
    assert [k.kernel for k in r.kernels] == ["k"]
    k = r.kernels[0]
    assert sorted(k.singles) == expect_singles and k.combinations == expect_pairs
    assert k.probes_run <= k.budget() + 1
    assert "probes" in r.table() and json.loads(json.dumps(r.to_dict()))["kernels"][0]["kernel"] == "k"
    # The whole-program runs before the search are shown too: one hung on k, one worked without it.
    assert [(a.status, a.stalled_kernel) for a in r.whole_runs] == [("hang", "k"), ("ok", None)]
    assert "(whole program)" in r.table() and "2 run(s) of the whole set" in r.table()
    # Every probe is in the store; a second sweep answers from it without probing the kernel.
    assert len(store.records(kernel="k")) >= k.probes_run
    again = sweep_sections(Session.open(command, cfg, store=store), sections=PAIRED)
    assert again.kernels[0].probes_run == 0
    assert sorted(again.kernels[0].singles) == expect_singles


def test_sweep_with_nothing_hanging(cfg):
    r = sweep_sections(Session.open(app("vec_add", "block_reduce"), cfg), sections=SMALL)
    assert r.clean and r.kernels == []


def test_sweep_cli(fake_env, tmp_path, capsys, monkeypatch):
    """Through main(argv) in this process (the command line's own process is tests/cli's): the interpreter's start
    and the imports of two `python -m nsightwrap` saved."""
    monkeypatch.chdir(tmp_path)
    md = tmp_path / "debug.md"
    code, out, err = cli_main(["sweep-sections", "-q", "--json", "--stall-timeout", str(STALL_S),
                               "--store", str(tmp_path / "s.db"), "--markdown", str(md),
                               "--section", "SourceCounters", "--section", "LaunchStats",
                               "--", *app("vec_add", "k@hang-if=SourceCounters")], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["kernels"][0]["kernel"] == "k" and d["kernels"][0]["hang_alone"] == ["SourceCounters"]
    # The result carries its exit code: a hang found is the sweep's success (tests/fallback/test_session.py's sweep
    # of this program once).
    assert d["status"] == "hang" and d["exit_code"] == 0
    assert md.read_text().startswith("# Debug log: k")
    code, out, err = cli_main(["hangs", "list", "--store", str(tmp_path / "s.db")], capsys)
    assert code == 0 and "k" in out

"""Multi-process launches, pure parts: reading torchrun/mpirun/srun command lines, rewriting one so
that ncu wraps one rank, the rank wrapper's choice, collective families, one-rank rungs, job sizes."""

from __future__ import annotations

import re

import pytest
from helpers import version_1_store

from nsightwrap.errors import LadderError, OptionsError
from nsightwrap.fallback.collectives import JobShape, family_filter, unprofiled_reason
from nsightwrap.fallback.ladder import exclude_kernels, ladder_from_dict, load_ladder
from nsightwrap.ncu.events import Connected, Disconnected
from nsightwrap.ncu.known import collective_family
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.output import parse_all
from nsightwrap.ncu.progress import WatchState
from nsightwrap.ncu.tally import RunTally
from nsightwrap.store.keys import Environment, ProfileKey, job_gpus
from nsightwrap.watch.launchers import WRAPPER_MODULE, launcher_python, one_rank_argv, parse_launch, wrap_one_rank
from nsightwrap.watch.onerank import plan

NCU = ["/usr/local/cuda/bin/ncu", "--metrics", "gpu__time_duration.sum", "--replay-mode", "kernel"]
W = ["wpy", "-m", WRAPPER_MODULE]


def wrapped(command, rank=0, python="py"):
    return wrap_one_rank(parse_launch(command), NCU, rank, python=python, wrapper_python="wpy")


def wrapper(rank=0):
    return [*W, "--rank", str(rank), "--ncu-argv", *NCU, "--"]


# --- the rewrite: list in, list out --------------------------------------------------------------

@pytest.mark.parametrize("command,expected", [
    (["torchrun", "--nproc-per-node", "2", "prog.py", "--lr", "1"],
     ["torchrun", "--nproc-per-node", "2", "--no-python", *wrapper(), "py", "-u", "prog.py", "--lr", "1"]),
    (["torchrun", "--standalone", "--nproc_per_node=2", "-m", "pkg.train", "x"],
     ["torchrun", "--standalone", "--nproc_per_node=2", "--no-python", *wrapper(), "py", "-u", "-m", "pkg.train", "x"]),
    (["/venv/bin/torchrun", "--nnodes", "1", "--nproc-per-node", "4", "--no-python", "./app", "7"],
     ["/venv/bin/torchrun", "--nnodes", "1", "--nproc-per-node", "4", "--no-python", *wrapper(), "./app", "7"]),
    (["torchrun", "--nproc-per-node", "2", "--", "prog.py", "-v"],
     ["torchrun", "--nproc-per-node", "2", "--no-python", "--", *wrapper(), "py", "-u", "prog.py", "-v"]),
])
def test_torchrun_rewrite(command, expected):
    assert wrapped(command) == expected


def test_python_m_torch_distributed_run_uses_its_own_python():
    command = ["/usr/bin/python3.12", "-m", "torch.distributed.run", "--nproc-per-node=2", "prog.py"]
    launch = parse_launch(command)
    assert launch.kind == "torchrun" and launch.processes == 2 and launcher_python(launch, "other") == command[0]
    assert wrapped(command, python=launcher_python(launch, "other")) == [
        *command[:4], "--no-python", *wrapper(), "/usr/bin/python3.12", "-u", "prog.py"]


@pytest.mark.parametrize("command,expected", [
    (["mpirun", "-np", "2", "-x", "NCCL_DEBUG", "--mca", "btl", "self,vader", "./app", "1"],
     ["mpirun", "-np", "2", "-x", "NCCL_DEBUG", "--mca", "btl", "self,vader", *wrapper(1), "./app", "1"]),
    (["mpiexec.hydra", "-n", "4", "-ppn", "2", "-genv", "A", "1", "python3", "t.py"],
     ["mpiexec.hydra", "-n", "4", "-ppn", "2", "-genv", "A", "1", *wrapper(1), "python3", "t.py"]),
    (["srun", "-n4", "--gpus-per-task=1", "-N", "2", "python", "t.py", "--x"],
     ["srun", "-n4", "--gpus-per-task=1", "-N", "2", *wrapper(1), "python", "t.py", "--x"]),
])
def test_mpirun_and_srun_rewrite(command, expected):
    assert wrapped(command, rank=1) == expected


@pytest.mark.parametrize("command,processes,local", [
    (["torchrun", "--nproc-per-node", "2", "p.py"], 2, 2),
    (["torchrun", "--nnodes=2", "--nproc_per_node", "4", "p.py"], 8, 4),
    (["torchrun", "--nnodes", "1:4", "--nproc-per-node", "2", "p.py"], None, 2),
    (["torchrun", "--nproc-per-node", "gpu", "p.py"], None, None),
    (["torchrun", "p.py"], 1, 1),
    (["mpirun", "-np", "8", "./a"], 8, 8),
    (["mpirun", "-np", "8", "-H", "a,b", "-N", "4", "./a"], 8, 4),
    (["mpirun", "-np", "8", "--hostfile", "h", "./a"], 8, None),
    (["srun", "--ntasks=4", "./a"], 4, 4),
    (["srun", "-N", "2", "--ntasks-per-node", "2", "./a"], 4, 2),
])
def test_world_size_from_the_command_line(command, processes, local):
    launch = parse_launch(command)
    assert (launch.processes, launch.local_processes) == (processes, local)


def test_commands_that_are_not_launches_or_cannot_be_split():
    assert parse_launch(["./app", "torchrun"]) is None and parse_launch(["python3", "train.py"]) is None
    odd = parse_launch(["mpirun", "--frobnicate", "3", "./a"])
    assert odd.problem and "--frobnicate" in odd.problem and "=VALUE" in odd.problem
    with pytest.raises(OptionsError, match="--frobnicate"):
        wrap_one_rank(odd, NCU, 0, python="py", wrapper_python="wpy")
    with pytest.raises(OptionsError, match="no program"):
        wrapped(["srun", "-n", "2"])
    with pytest.raises(OptionsError, match="rank 2 is not in this torchrun job of 2"):
        wrapped(["torchrun", "--nproc-per-node", "2", "p.py"], rank=2)
    with pytest.raises(OptionsError, match="none nsightwrap knows"):
        one_rank_argv(["./app"], ["ncu", "./app"], 0, "wpy")


def test_one_rank_argv_splits_the_profiler_prefix_from_the_command():
    command = ["torchrun", "--nproc-per-node", "2", "--no-python", "./app"]
    assert one_rank_argv(command, [*NCU, *command], 1, "wpy") == [
        "torchrun", "--nproc-per-node", "2", "--no-python", *wrapper(1), "./app"]


def test_launcher_python_reads_the_shebang(tmp_path):
    script = tmp_path / "torchrun"
    script.write_text("#!/opt/venv/bin/python3.11\nimport sys\n")
    assert launcher_python(parse_launch([str(script), "p.py"]), "dflt") == "/opt/venv/bin/python3.11"
    script.write_text("#!/usr/bin/env python3\n")
    assert launcher_python(parse_launch([str(script), "p.py"]), "dflt") == "python3"
    assert launcher_python(parse_launch([str(tmp_path / "missing" / "torchrun"), "p.py"]), "dflt") == "dflt"


def test_launcher_python_finds_a_bare_launcher_on_path(tmp_path, monkeypatch):
    script = tmp_path / "torchrun"
    script.write_text("#!/opt/venv/bin/python3.11\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert launcher_python(parse_launch(["torchrun", "p.py"]), "dflt") == "/opt/venv/bin/python3.11"
    monkeypatch.setenv("PATH", str(tmp_path / "missing"))
    assert launcher_python(parse_launch(["torchrun", "p.py"]), "dflt") == "dflt"


# --- the rank wrapper ---------------------------------------------------------------------------

@pytest.mark.parametrize("env", [{"RANK": "1", "LOCAL_RANK": "1"}, {"OMPI_COMM_WORLD_RANK": "1"}, {"PMI_RANK": "1"},
                                 {"SLURM_PROCID": "1"}, {"LOCAL_RANK": "1"}])
def test_wrapper_execs_ncu_on_the_chosen_rank_only(env):
    args = ["--rank", "1", "--ncu-argv", "ncu", "--set", "basic", "--", "python3", "t.py"]
    command, said = plan(args, env)
    assert command == ["ncu", "--set", "basic", "python3", "t.py"] and "rank 1" in said
    other = {k: "0" for k in env}
    assert plan(args, other) == (["python3", "t.py"], None)


def test_wrapper_says_what_is_wrong():
    with pytest.raises(OptionsError, match="cannot tell its rank"):
        plan(["--rank", "0", "--ncu-argv", "ncu", "--", "a"], {})
    with pytest.raises(OptionsError, match="usage"):
        plan(["--rank", "x", "--ncu-argv", "ncu", "--", "a"], {"RANK": "0"})


# --- collectives, exclusions, job sizes -------------------------------------------------------------

def test_collective_families_are_excluded_by_prefix():
    assert collective_family("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "nccl"
    assert collective_family("nvshmemi_barrier") == "nvshmem" and collective_family("gemm") is None
    f = exclude_kernels(None, ["cross_device_reduce"], ["nccl"])
    assert f.value == "regex:^(?!(?:cross_device_reduce)$|nccl).*"
    for name, kept in (("gemm", True), ("ncclDevKernel_AllGather_RING_LL", False), ("cross_device_reduce", False),
                       ("cross_device_reduce_2stage", True)):
        assert bool(re.search(f.pattern, name)) is kept, name
    only = family_filter("nccl", KernelFilter("AllReduce", True))
    assert re.search(only.pattern, "ncclDevKernel_AllReduce_Sum")
    assert not re.search(only.pattern, "ncclDevKernel_AllGather")
    assert family_filter("nccl", None).value == "regex:^nccl"


def test_job_shape_from_the_command_and_from_ncu_output():
    torchrun = JobShape.of(["torchrun", "--nproc-per-node", "2", "p.py"])
    assert torchrun.multi and torchrun.one_rank_possible and torchrun.seen(5) == torchrun  # the command line wins
    plain = JobShape.of(["./app"])
    assert not plain.multi and not plain.one_rank_possible and plain.seen(1) == plain
    forked = plain.seen(3)
    assert forked.multi and forked.processes == 3 and not forked.one_rank_possible
    assert "no launcher" in unprofiled_reason("k", forked, load_ladder("default"), False)
    gpu_count = JobShape.of(["torchrun", "--nproc-per-node", "gpu", "p.py"])
    assert not gpu_count.multi and gpu_count.one_rank_possible and gpu_count.seen(2).processes == 2
    assert not JobShape.of(["torchrun", "p.py"]).one_rank_possible  # one process: nothing to single out


def test_most_processes_connected_at_once():
    """Counted at once, not in all: application replay connects to the program again for every pass. What
    production reads: the run's tally (the attempt's `connected`) and the watch state (the known-cause rules)."""
    two_ranks = [(0, Connected(1, "py")), (0, Connected(2, "py")), (0, Disconnected(1)), (0, Disconnected(2))]
    app_replay = [(0, Connected(1, "a")), (0, Disconnected(1)), (0, Connected(2, "a")), (0, Disconnected(2))]

    def watched(events):
        state = WatchState(started_at=0.0, last_output_at=0.0)
        for t, e in events:
            state.observe(e, float(t))
        return state.most_connected

    for most in (lambda ev: RunTally.of(ev).most_connected, watched):
        assert most(two_ranks) == 2 and most(app_replay) == 1 and most([]) == 0
    import nsightwrap.ncu.attempt as attempt

    assert not hasattr(attempt, "most_connected")  # a third count, of no production caller: gone


def test_another_ranks_connect_line_does_not_lose_a_kernel():
    """Under ncu the ranks' output interleaves: rank 1 connects in the middle of rank 0's progress line."""
    events = parse_all('==PROF== Connected to process 1 (/py)\n==PROF== Profiling "vec_add" - 0: 0%....50%...'
                       '==PROF== Connected to process 2 (/py)\n.100% - 10 passes\n')
    assert [type(e).__name__ for e in events if type(e).__name__ in ("Connected", "KernelDone", "Output")] == [
        "Connected", "Connected", "KernelDone"]


def test_gpus_of_a_job():
    assert job_gpus(2, 2, None) == 2 and job_gpus(1, 8, None) == 1 and job_gpus(4, 2, None) == 2
    assert job_gpus(2, 8, "3") == 1 and job_gpus(2, None, None) is None and job_gpus(2, 0, None) is None


def test_environment_detect_counts_the_jobs_gpus(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 580.1'\necho 'NVIDIA H100 80GB HBM3, 580.1'\n")
    smi.chmod(0o755)
    env = Environment.detect("2025.3.1", processes=2, nvidia_smi=str(smi))
    assert (env.processes, env.gpus) == (2, 2) and "2 processes on 2 GPU(s)" in env.describe()
    assert (Environment.detect(nvidia_smi=str(smi)).processes, Environment.detect(nvidia_smi=str(smi)).gpus) == (1, 1)
    assert Environment.detect(processes=2, cuda_visible="0", nvidia_smi=str(smi)).gpus == 1


# --- one-rank rungs and keys -------------------------------------------------------------------------

def test_one_rank_rungs_in_yaml():
    ladder = ladder_from_dict({"name": "t", "rungs": [
        {"requested": True}, {"name": "one", "ranks": "one", "metrics": ["gpu__time_duration.sum"]}]})
    opts, _ = ladder[1].apply(ProfileOptions(set="full"), rank=1)
    assert opts.rank == 1 and ProfileKey.from_options(opts).ranks == "one"
    assert ladder[1].describe() == "metrics gpu__time_duration.sum, kernel replay, one rank"
    mine, _ = ladder[1].apply(ProfileOptions(set="full", rank=3), rank=1)
    assert mine.rank == 3  # the caller's choice of rank wins
    assert [r.name for r in ladder.for_processes(False)] == ["rung-1"]
    with pytest.raises(LadderError, match="ranks 'two' is not one of all, one"):
        ladder_from_dict({"rungs": [{"ranks": "two"}]})
    with pytest.raises(LadderError, match="only one-rank rungs"):
        ladder_from_dict({"name": "o", "rungs": [{"ranks": "one", "sections": ["LaunchStats"]}]}).for_processes(False)


def test_profile_key_ranks_keep_old_keys_equal():
    assert ProfileKey("basic").canonical() == '{"metrics":[],"replay_mode":"kernel","sections":[],"set":"basic"}'
    one = ProfileKey(metrics=("gpu__time_duration.sum",), ranks="one")
    assert '"ranks":"one"' in one.canonical() and ProfileKey.parse(one.canonical()) == one
    assert ProfileKey.parse(ProfileKey("basic").canonical()).ranks == "all"
    with pytest.raises(ValueError):
        ProfileKey(ranks="some")
    assert ProfileOptions(rank=0).rank == 0
    with pytest.raises(OptionsError):
        ProfileOptions(rank=-1)


# --- the store knows the job's size ---------------------------------------------------------------------

def test_an_older_store_is_migrated_and_its_records_count_as_single_process(tmp_path):
    from nsightwrap.store.hangstore import HangStore
    from nsightwrap.store.schema import SCHEMA_VERSION

    path = version_1_store(tmp_path / "old.db",
                           "INSERT INTO records (time, gpu, ncu_version, kernel, kernel_pattern, replay_mode, key, "
                           "outcome) VALUES ('t', 'H100', '2025.3.1', 'k', 'k', 'kernel', ?, 'hang')",
                           (ProfileKey("basic").canonical(),))
    single = Environment(gpu="H100", ncu_version="2025.3.1")
    two = Environment(gpu="H100", ncu_version="2025.3.1", processes=2, gpus=2)
    with HangStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 5
        (old,) = store.records()
        assert (old.processes, old.gpus, old.ranks) == (1, None, "all")
        assert store.hangs_for("k", ProfileKey("basic"), single) and not store.hangs_for("k", ProfileKey("basic"), two)
        one_rank = ProfileKey(metrics=("gpu__time_duration.sum",), ranks="one")
        store.record("k", one_rank, "ok", env=two, passes=1)
        store.record("k", ProfileKey("basic"), "hang", env=two, stall_s=10)
        assert store.hangs_for("k", ProfileKey("basic"), two) and not store.hangs_for("k", one_rank, two)
        new = store.records()[0]
        assert (new.processes, new.gpus, new.ranks, new.environment) == (2, 2, "all", two)
        assert store.records()[1].profile_key == one_rank


def test_a_hang_of_every_rank_points_to_one_rank():
    from nsightwrap.fallback.collectives import one_rank_hint

    torchrun = ["torchrun", "--nproc-per-node", "2", "p.py"]
    assert "--rank 0 --metrics gpu__time_duration.sum" in one_rank_hint(torchrun, 2, "ncclDevKernel_AllReduce")
    assert "regex:^(?!nccl)" in one_rank_hint(["./forks"], 2, "ncclDevKernel_AllReduce")  # no launcher to rewrite
    assert one_rank_hint(["./app"], 1, "k") is None

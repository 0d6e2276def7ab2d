"""A process of the run itself is never foreign (issue 19, item 3), with the fake nvidia-smi.

The race seen on the GPU machine (6 times in 60 runs under CPU load): the
foreign-process check, made beside the launch, got nvidia-smi's listing while
a process of the run had just exited and was not yet reaped (a zombie, whose
environment no longer says whose it is), and took it for someone else's. The
fake nvidia-smi makes it deterministic: it lists the pids of FAKE_SMI_STICKY
(dead or not) and, with FAKE_SMI_WAIT_STICKY=1, answers only once the program
has written its pid there.
"""

from __future__ import annotations

import os
import uuid

import psutil
import pytest
from helpers import FAKE_SMI_DIR, app, fast_stop, run_config

from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.keys import Environment, ProfileKey
from nsightwrap.watch import gpu


@pytest.fixture
def smi(fake_env, monkeypatch, tmp_path):
    """The fake nvidia-smi on PATH, listing this test's processes and the pids in `sticky` once there are some."""
    sticky = tmp_path / "sticky"
    sticky.write_text("")
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_STICKY", str(sticky))
    monkeypatch.setenv("FAKE_SMI_WAIT_STICKY", "1")
    return sticky


def _run(tmp_path, *steps):
    # drain 0.2: the bare child (`sleep 3`) holds the program's stdout after the program ended; the run waits
    # `drain` for the pipe to close before it stops the leftovers (fast_stop's 1 s was waited out each time).
    return profile_command(app(*steps), ProfileOptions(set="basic"),
                           run_config(tmp_path, env=dict(os.environ), check_gpu=True, stop=fast_stop(drain=0.2)))


def test_a_process_of_the_run_that_just_exited_is_not_foreign(smi, tmp_path, store):
    """The program's child has exited but is not reaped (a zombie) when nvidia-smi still lists it.

    The program lives 0.5 s on after it listed its zombie: the foreign check looked 15-65 ms after the listing
    on the loaded 2-core machine (measured), so it meets the zombie, not a reaped pid."""
    a = _run(tmp_path, f"zombie:{smi}", "sleep:0.5", "vec_add")
    [pid] = [int(p) for p in smi.read_text().split()]
    assert a.status == "ok" and a.gpu_foreign_before == (), a.gpu_foreign_before
    assert not any("not this run's" in n for n in a.notes)
    records = store.record_attempt(a, ProfileKey("basic"), Environment("h", "NVIDIA H200", "580", "2025.3.1.0"))
    assert records and all(r.trusted for r in records)  # its records decide what later walks skip
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_process_of_the_run_without_its_cookie_is_not_foreign(smi, tmp_path):
    """A child that dropped its environment (no cookie, no owner) is still the run's: the tree saw it descend
    from the program."""
    a = _run(tmp_path, f"bare:{smi}", "sleep:0.5", "vec_add")
    assert a.status == "ok" and a.gpu_foreign_before == (), a.gpu_foreign_before
    [pid] = [int(p) for p in smi.read_text().split()]
    try:
        psutil.Process(pid).kill()
    except psutil.Error:
        pass


def test_a_foreign_process_is_still_foreign(smi, tmp_path):
    """The same listing with a live process that is not the run's: still reported."""
    other = psutil.Popen(["sleep", "30"], env={})
    try:
        smi.write_text(f"{other.pid}\n")
        a = _run(tmp_path, "vec_add")
    finally:
        other.kill()
        other.wait()
    assert [f.split()[0] for f in a.gpu_foreign_before] == [str(other.pid)]


def test_foreign_leaves_out_zombies_and_ours():
    zombie_parent = psutil.Popen(["sh", "-c", "sleep 0 & exec sleep 5"])
    try:
        child = None
        for _ in range(200):
            kids = zombie_parent.children()
            if kids and kids[0].status() == psutil.STATUS_ZOMBIE:
                child = kids[0]
                break
            psutil.wait_procs([], timeout=0.02)
        assert child is not None
        listed = [gpu.GpuProcess(child.pid, "x", ""), gpu.GpuProcess(zombie_parent.pid, "sleep", ""),
                  gpu.GpuProcess(os.getpid(), "me", "")]
        assert [p.pid for p in gpu.foreign(listed, [os.getpid()])] == [zombie_parent.pid]
    finally:
        zombie_parent.kill()
        zombie_parent.wait()

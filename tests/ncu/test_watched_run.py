"""The watched run end to end, with the fake ncu (a real process tree).

Each test checks that no process carrying the run's cookie survives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import (
    HERE,
    app,
    assert_clean,
    cli_main,
    fast_stop,
    run_cli,
    run_config,
    sigterm_once_hung,
    without_ncu_anywhere,
)

from nsightwrap.errors import OptionsError, ProfileInterrupted
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.reports.ncu import attempt_dataframe
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, StopPolicy, processes_with


def config(tmp_path, **kw) -> RunConfig:
    kw.setdefault("stall_timeout", 1.0)
    kw.setdefault("stop", fast_stop(grace=3.0))
    return run_config(tmp_path, **kw)


def test_ok_run_profiles_every_kernel(fake_env, tmp_path):
    a = profile_command(app("vec_add", "vec_add", "block_reduce"), ProfileOptions(set="basic"), config(tmp_path))
    assert a.status == "ok" and a.exit_code == 0
    assert [(k.name, k.kernel_id, k.passes) for k in a.kernels] == [
        ("vec_add", 0, 10), ("vec_add", 1, 10), ("block_reduce", 2, 10)]
    assert a.report_complete and a.report.exists()
    # Named after the program: the interpreter's name as invoked (python3, python, python3.12 in a venv ...).
    assert a.report.name.startswith(f"{Path(sys.executable).name}-app.py-vec_add-")
    assert a.report.name.endswith(".ncu-rep")
    assert a.stop is None and a.stall is None
    assert "app: no error" in a.log
    assert_clean(a)


def test_hang_is_detected_stopped_and_partial_report_kept(fake_env, tmp_path):
    t0 = time.monotonic()
    a = profile_command(app("vec_add", "vec_add", "vec_add", "wait_for_host@hang", "vec_add"),
                        ProfileOptions(set="basic"), config(tmp_path, stall_timeout=0.8))
    took = time.monotonic() - t0
    assert a.status == "hang" and a.exit_code == 3
    assert a.stalled_kernel == "wait_for_host" and a.stall.kernel_id == 3
    assert a.stall.where == "0%.."
    assert a.stall.before_first_progress and "single replay pass longer" in a.reason
    assert a.stall.slow_warning_seen  # recorded, not the verdict
    assert 0.8 <= a.detection_s < 1.5
    assert [k.name for k in a.kernels] == ["vec_add"] * 3
    assert a.report is not None and a.report.exists() and not a.report_complete
    # The fake keeps a real partial report (three vec_add made on the GPU machine): it reads back.
    assert list(attempt_dataframe(a)["function"]) == ["vec_add"] * 3
    # SIGINT to the inner front end was enough: the report line came, the tree exited.
    assert a.stop.graceful and a.stop.steps[0].startswith("SIGINT to profiler")
    assert any("Report:" in line for line in a.log.splitlines())
    assert took < 6
    assert_clean(a)


def test_slow_kernel_that_keeps_moving_is_not_killed(fake_env, tmp_path):
    # Marks 0.35 s apart against a 0.6 s stall timeout; the 0.3 s slow-launch
    # warning cuts the progress line and the kernel goes on.
    a = profile_command(app("vec_add", "slow_kernel@slow=0.35/2", "vec_add"), ProfileOptions(set="basic"),
                        config(tmp_path, stall_timeout=0.6))
    assert a.status == "ok", a.describe()
    assert [k.name for k in a.kernels] == ["vec_add", "slow_kernel", "vec_add"]
    assert a.slow_launch_warnings == 1
    assert_clean(a)


def test_allowance_grows_with_the_pace_of_progress(fake_env, tmp_path):
    # The first gaps (0.3 s) fit in 0.5 s; a later gap of 0.9 s would not, but the
    # allowance is 4x the longest gap seen, so the kernel is not called hung.
    a = profile_command(app("k1@slow=0.3/2", "k2@slow=0.9/1"), ProfileOptions(set="basic"),
                        config(tmp_path, stall_timeout=0.5))
    assert a.status == "ok", a.describe()
    assert_clean(a)


def test_wedged_profiler_is_killed(fake_env, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_WEDGED", "1")
    a = profile_command(app("vec_add", "k@hang"), ProfileOptions(set="basic"),
                        # Each step is waited out (the front end ignores SIGINT and SIGTERM): the steps are checked,
                        # not their length.
                        config(tmp_path, stall_timeout=0.5, stop=StopPolicy(grace=0.2, term_wait=0.2, kill_wait=2.0)))
    assert a.status == "hang"
    assert not a.stop.graceful
    steps = " ".join(a.stop.steps)
    assert "SIGINT" in steps and "SIGTERM" in steps and "SIGKILL" in steps
    assert a.stop.survivors == []
    assert a.report is not None  # written after the first kernel, before the hang
    assert_clean(a)


def test_inner_profiler_escapes_the_process_group(fake_env, tmp_path):
    """The fake is as hard as the real tree: killing the started group misses the profiler."""
    seen = {}

    def look(text):
        if "0%.." in text and not seen:
            for p, env in processes_with(COOKIE_VAR):
                if env.get(OWNER_VAR) != str(os.getpid()):
                    continue  # another test's run (parallel workers, other checkouts)
                try:
                    seen[p.pid] = (os.getpgid(p.pid), " ".join(p.cmdline()[:2]))
                except (OSError, psutil.Error):
                    pass

    a = profile_command(app("k@hang"), ProfileOptions(set="basic"), config(tmp_path, stall_timeout=0.5),
                        on_output=look)
    assert a.status == "hang"
    groups = {g for g, _ in seen.values()}
    assert len(groups) >= 2, seen
    assert_clean(a)


def test_total_timeout(fake_env, tmp_path):
    a = profile_command(app("vec_add", "sleep:30"), ProfileOptions(set="basic"), config(tmp_path, timeout=1.0))
    assert a.status == "timeout" and a.exit_code == 4
    assert "total timeout" in a.reason
    assert [k.name for k in a.kernels] == ["vec_add"]
    assert_clean(a)


def test_ctrl_c_stops_the_tree_and_keeps_the_attempt(fake_env, tmp_path):
    def interrupt(text):
        if "Profiling \"k2\"" in text:
            raise KeyboardInterrupt

    with pytest.raises(ProfileInterrupted) as info:
        profile_command(app("k1", "k2@slow=0.2", "k3"), ProfileOptions(set="basic"), config(tmp_path),
                        on_output=interrupt)
    a = info.value.attempt
    assert a.status == "interrupted" and a.exit_code == 130
    assert [k.name for k in a.kernels] == ["k1"]
    assert a.report is not None and a.report.exists()
    assert_clean(a)


def test_an_exception_in_a_callback_still_stops_the_tree(fake_env, tmp_path):
    cookies = []

    def boom(text):
        if "Connected" in text:
            cookies.extend(env[COOKIE_VAR] for _, env in processes_with(COOKIE_VAR)
                           if env.get(OWNER_VAR) == str(os.getpid()))
            raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        profile_command(app("k1@slow=0.2", "k2"), ProfileOptions(set="basic"), config(tmp_path), on_output=boom)
    assert cookies
    for c in set(cookies):
        assert processes_with(COOKIE_VAR, c) == []


def test_options_ncu_rejects_are_caught_before_launching(fake_env, tmp_path):
    opts = ProfileOptions(replay_mode="range", kernel=KernelFilter("vec_add", False))
    with pytest.raises(OptionsError, match="kernel"):
        profile_command(app("vec_add"), opts, config(tmp_path))
    with pytest.raises(OptionsError, match="SpeedOfLight"):
        profile_command(app("vec_add"), ProfileOptions(sections=("SpeedOfLigth",)), config(tmp_path))


def test_ncu_error_becomes_status_error_with_a_hint(fake_env, tmp_path):
    opts = ProfileOptions(replay_mode="range", kernel=KernelFilter("vec_add", False))
    a = profile_command(app("vec_add"), opts, config(tmp_path, validate=False))
    assert a.status == "error" and a.exit_code == 5
    assert "not supported during range replay" in a.reason and "drop that option" in a.reason
    assert a.report is None
    assert_clean(a)


def test_no_kernels(fake_env, tmp_path):
    a = profile_command(app("print:hello"), ProfileOptions(set="basic"), config(tmp_path))
    assert a.status == "no-kernels" and a.exit_code == 6
    assert "No kernels were profiled" in a.reason
    assert a.report is None


def test_range_replay_without_ranges_profiles_nothing(fake_env, tmp_path):
    a = profile_command(app("vec_add"), ProfileOptions(replay_mode="range"), config(tmp_path))
    assert a.status == "no-kernels" and "No ranges were profiled" in a.reason


def test_range_replay_profiles_the_marked_range(fake_env, tmp_path):
    a = profile_command(app("vec_add", "start", "k@hang", "vec_add", "stop"), ProfileOptions(replay_mode="range"),
                        config(tmp_path))
    assert a.status == "ok"
    assert [k.name for k in a.kernels] == ["range"]


def test_crash_of_the_program_keeps_earlier_kernels(fake_env, tmp_path):
    a = profile_command(app("vec_add", "exit:3"), ProfileOptions(set="basic"), config(tmp_path))
    assert a.status == "crashed" and a.exit_code == 7
    assert "exit code 3" in a.reason
    assert [k.name for k in a.kernels] == ["vec_add"]
    assert a.report is not None and a.report.exists()


def test_application_replay(fake_env, tmp_path):
    """The nvlink set: 4 passes, so 4 runs of the program (basic's 10 cost 10)."""
    a = profile_command(app("vec_add", "block_reduce"), ProfileOptions(set="nvlink", replay_mode="application"),
                        config(tmp_path))
    assert a.status == "ok", a.describe()
    assert [(k.name, k.passes, k.replay) for k in a.kernels] == [
        ("vec_add", 4, "application"), ("block_reduce", 4, "application")]


def test_application_replay_hang(fake_env, tmp_path):
    a = profile_command(app("vec_add", "k@hang"), ProfileOptions(set="basic", replay_mode="application"),
                        config(tmp_path, stall_timeout=0.5))
    assert a.status == "hang" and a.stalled_kernel == "k"
    assert "application replay pass 1" in a.reason
    assert_clean(a)


def test_application_replay_hang_when_ncu_is_slow_to_say_connected(fake_env, tmp_path, monkeypatch):
    """The fake's launcher is slow to say "Connected" (a loaded machine): the target's first lines still come
    after it, as with the real injection, which waits for ncu to accept it. Before, they came first, the pass
    looked finished, and the run waited for ever (seen under load; the total timeout here only ends a regression)."""
    monkeypatch.setenv("FAKE_NCU_CONNECT_DELAY", "0.3")
    a = profile_command(app("vec_add", "k@hang"), ProfileOptions(set="basic", replay_mode="application"),
                        config(tmp_path, stall_timeout=0.5, timeout=30))
    assert a.status == "hang" and a.stalled_kernel == "k", a.describe()
    assert_clean(a)


def test_nothing_of_the_program_runs_before_ncu_says_connected(fake_env, tmp_path, monkeypatch):
    """The real injection holds the process until ncu has accepted it: a program that writes at once (no CUDA, no
    fakecuda) writes after "Connected", even when the launcher is slow to say it. (The fake held only fakecuda's
    messages: under load a program's first bytes came before the line, and a pass-through test failed.)"""
    monkeypatch.setenv("FAKE_NCU_CONNECT_DELAY", "0.3")
    script = tmp_path / "first.py"
    script.write_text("import os; os.write(1, b'first bytes\\n')\n")
    done = subprocess.run([str(HERE / "fake_ncu" / "ncu"), "--export", str(tmp_path / "r"), sys.executable, "-S",
                           str(script)], capture_output=True, env=dict(os.environ), timeout=60)
    out = done.stdout.decode()
    assert done.returncode == 0 and "first bytes" in out, out
    assert out.find("==PROF== Connected to process") in range(out.index("first bytes")), out


def test_kernel_filter_skips_the_hanging_kernel(fake_env, tmp_path):
    a = profile_command(app("vec_add", "k@hang", "vec_add"),
                        ProfileOptions(set="basic", kernel=KernelFilter("vec_.*", True)), config(tmp_path))
    assert a.status == "ok" and [k.name for k in a.kernels] == ["vec_add", "vec_add"]


def test_report_is_never_overwritten(fake_env, tmp_path):
    out = tmp_path / "mine.ncu-rep"
    first = profile_command(app("vec_add"), ProfileOptions(export=str(out)), config(tmp_path))
    second = profile_command(app("vec_add"), ProfileOptions(export=str(out)), config(tmp_path))
    assert first.report == out
    assert second.report == tmp_path / "mine-1.ncu-rep"
    assert any("already exists and is kept" in n for n in second.notes)


def test_leftover_processes_of_the_program_are_stopped(fake_env, tmp_path):
    # The program starts a daemon in its own session that outlives it.
    daemon = ("import subprocess,sys; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], "
              "start_new_session=True, stdout=subprocess.DEVNULL)")
    # It holds the pipe: the run waits `drain` for it to close, then stops what is left.
    a = profile_command([sys.executable, "-c", daemon], ProfileOptions(set="basic"),
                        config(tmp_path, stop=fast_stop(drain=0.3)))
    assert a.status == "no-kernels"
    assert any("left processes behind" in n for n in a.notes)
    assert_clean(a)


# Runs whose nsightwrap was killed: tests/watch/test_hostile.py (the guard, `cleanup`).


# --- the command line -------------------------------------------------------------


def test_cli_json_on_hang(fake_env, tmp_path):
    r = run_cli(["run", "--json", "--stall-timeout", "0.5", "--set", "basic", "-o", str(tmp_path / "r"), "--",
                 *app("vec_add", "k@hang")], fake_env)
    assert r.returncode == 3, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "hang" and d["stalled_kernel"] == "k"
    assert d["kernels"] == [{"name": "vec_add", "id": 0, "passes": 10, "replay": "kernel"}]
    assert d["report"] == str(tmp_path / "r.ncu-rep") and Path(d["report"]).exists()
    assert d["elapsed_s"] > 0 and d["detection_s"] >= 0.5
    assert "==PROF== Profiling" in r.stderr  # ncu's output is echoed on stderr, stdout is JSON only
    assert processes_with(COOKIE_VAR, d["cookie"]) == []


def test_cli_exit_codes(fake_env, tmp_path, capsys):
    """main(argv) in this process: the exit codes are its answers (a real process's: test_cli_json_on_hang)."""
    code, out, _ = cli_main(["run", "-q", "--json", "-o", str(tmp_path / "ok"), "--", *app("vec_add")], capsys)
    assert code == 0 and json.loads(out)["status"] == "ok"
    assert cli_main(["run", "-q", "--json", "--", *app()], capsys)[0] == 6
    code, _, err = cli_main(["run", "--section", "NoSuchSection", "--", *app()], capsys)
    assert code == 2 and "NoSuchSection" in err and "Traceback" not in err
    code, _, err = cli_main(["run"], capsys)
    assert code == 2 and "--" in err


def test_cli_without_ncu_says_what_is_missing(tmp_path):
    without_ncu_anywhere()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NSIGHTWRAP_CACHE_DIR": str(tmp_path / "c")}
    env["PYTHONPATH"] = str(HERE.parent)
    r = run_cli(["run", "--", "true"], env)
    assert r.returncode == 2
    assert "ncu was not found" in r.stderr and "NSIGHTWRAP_NCU" in r.stderr and "Traceback" not in r.stderr


def test_sigterm_to_the_cli_stops_the_tree(fake_env, tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "--json", "--stall-timeout", "30", "--",
                          *app("k@hang")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=fake_env)
    _, out = sigterm_once_hung(p, p.stderr)
    assert p.returncode == 130
    d = json.loads(out)
    assert d["status"] == "interrupted"
    assert processes_with(COOKIE_VAR, d["cookie"]) == []


def test_sigterm_to_a_python_caller_stops_the_tree(fake_env, tmp_path):
    """A script using the library, killed by `timeout` (SIGTERM), leaves nothing behind."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys, json\n"
        "from nsightwrap import profile_command, ProfileOptions, RunConfig, ProfileInterrupted\n"
        "try:\n"
        f"    profile_command({app('k@hang')!r}, ProfileOptions(set='basic'),\n"  # not helpers' imports: 25 ms
        f"                    RunConfig(stall_timeout=60, check_gpu=False, report_dir={str(tmp_path)!r}),\n"
        "                    on_output=lambda t: print(t, end='', flush=True))\n"
        "except ProfileInterrupted as e:\n"
        "    print('\\nCOOKIE', e.attempt.cookie, e.attempt.status, flush=True)\n"
        "    raise SystemExit(130)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=fake_env)
    buf, out = sigterm_once_hung(p, p.stdout)
    text = (buf + out).decode()
    assert p.returncode == 130, text
    cookie = text.split("COOKIE ")[1].split()[0]
    assert "interrupted" in text
    assert processes_with(COOKIE_VAR, cookie) == []

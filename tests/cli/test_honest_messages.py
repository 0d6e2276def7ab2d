"""Issue 23, item 10: messages that say what happened and what to do.

A program that cannot be run is a set-up error before anything is launched (not `crashed`); names
that would silently mean something else (`--kernel ''`, a report name with a newline, a dangling
symbolic link) are refused; a folder created for the report and a run record that could not be
written are said; the command line names its flags, not the library's parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, app, run_cli, run_config

from nsightwrap.cli.common import Parser, in_flags
from nsightwrap.errors import NsightwrapError, OptionsError, ProgramNotRunnable
from nsightwrap.fallback.session import Session
from nsightwrap.ncu.engine import plan_report, profile_command
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.watch.locate import check_program


def cli(args, env, cwd=None):
    return run_cli(args, dict(env, PYTHONPATH=str(ROOT)), cwd=cwd)


@pytest.fixture
def cli_here(monkeypatch, capfd):
    """`cli` in this process, through the CLI's own main(): for answers given before anything is launched (usage
    and set-up errors), without an interpreter's start each; `cli` runs the end-to-end cases."""
    from nsightwrap.cli.main import main

    def run(args, env, cwd=None):
        for name, value in env.items():
            if os.environ.get(name) != value:
                monkeypatch.setenv(name, value)
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capfd.readouterr()
        code = main(list(args))
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)
    return run


def one_json(stdout: str) -> dict:
    assert stdout.strip().count("\n") == 0, stdout
    return json.loads(stdout)


def refused(done, *needles: str) -> dict:
    """A usage/set-up error: exit 2, one JSON object, nothing launched, no traceback."""
    doc = one_json(done.stdout)
    assert done.returncode == 2 and doc["status"] == "error" and doc["exit_code"] == 2, (done.stdout, done.stderr)
    assert "==PROF==" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in doc["error"], doc["error"]
    return doc


@pytest.fixture
def programs(tmp_path):
    """A folder holding a script without its x bit, a folder and a dangling link."""
    (tmp_path / "noexec.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "noexec.sh").chmod(0o644)
    (tmp_path / "adir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    return tmp_path


# --- a program that cannot be run ------------------------------------------------------------------------------

@pytest.mark.parametrize("program, needles", [
    ("./noexec.sh", ["not executable", "chmod +x ./noexec.sh"]),
    ("./missing", ["no such file"]),
    ("no-such-program-here", ["not found on PATH"]),
    ("./adir", ["a folder"]),
    ("./dangling", ["symbolic link", "does not exist"]),
])
def test_run_refuses_a_program_it_cannot_launch(fake_env, programs, program, needles, cli_here):
    done = cli_here(["run", "--json", "-o", str(programs / "r"), "--", program], fake_env, cwd=programs)
    refused(done, repr(program), *needles)
    assert not list(programs.glob("r*.ncu-rep"))


def test_sweep_refuses_a_program_it_cannot_launch(fake_env, programs, cli_here):
    done = cli_here(["sweep-sections", "--json", "--no-preflight", "--store", str(programs / "s.db"), "--",
                "./noexec.sh"], fake_env, cwd=programs)
    refused(done, "not executable")
    assert not (programs / "s.db").exists()


def test_a_program_in_the_current_folder_is_named_with_its_path(programs):
    (programs / "tool").write_text("")
    with pytest.raises(ProgramNotRunnable, match=r"run it as \./tool"):
        check_program(["tool"], env={"PATH": str(programs / "adir")}, cwd=str(programs))


def test_check_program_follows_the_run_path_and_folder(programs):
    exe = programs / "adir" / "prog"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert check_program(["prog"], env={"PATH": str(programs / "adir")}) == str(exe)
    assert Path(check_program(["./prog", "x"], cwd=str(programs / "adir"))).resolve() == exe
    assert check_program([sys.executable, "-c", "pass"]) == sys.executable
    with pytest.raises(ProgramNotRunnable, match="no command"):
        check_program([])


def test_profile_command_raises_before_launching(fake_env, programs):
    config = run_config(programs, cwd=str(programs))
    with pytest.raises(ProgramNotRunnable, match="not executable") as caught:
        profile_command(["./noexec.sh"], ProfileOptions(), config)
    assert isinstance(caught.value, NsightwrapError) and caught.value.program == "./noexec.sh"
    assert not (programs / "reports").exists()  # refused before the report was planned


def test_walk_and_sweep_raise_before_launching(fake_env, programs):
    from nsightwrap.fallback.sweep import sweep_sections
    from nsightwrap.fallback.walk import walk_ladder

    config = run_config(programs)
    with pytest.raises(ProgramNotRunnable, match="not found on PATH"):
        walk_ladder(Session.open(["no-such-program-here"], config), ProfileOptions(), "quick")
    with pytest.raises(ProgramNotRunnable, match="no such file"):
        sweep_sections(Session.open([str(programs / "missing")], config), sections=("LaunchStats",))
    assert not (programs / "reports").exists()


# --- report names ------------------------------------------------------------------------------------------------

def test_a_missing_report_folder_is_created_and_said(fake_env, tmp_path, cli_here):
    target = tmp_path / "new" / "deeper" / "r"
    done = cli_here(["run", "--json", "-q", "-o", str(target), "--", *app("vec_add")], fake_env)
    doc = one_json(done.stdout)
    assert doc["status"] == "ok" and Path(doc["report"]).parent == target.parent
    said = f"created the folder {target.parent} for the report"
    assert any(said in n for n in doc["notes"]) and said in done.stderr
    again = cli_here(["run", "--json", "-q", "-o", str(target), "--", *app("vec_add")], fake_env)
    assert not any("created the folder" in n for n in one_json(again.stdout)["notes"])  # it exists now


def test_a_walk_says_the_report_folder_it_created(fake_env, tmp_path, cli_here):
    target = tmp_path / "walk" / "r"
    done = cli_here(["run", "--json", "-q", "--profile", "quick", "--no-preflight", "--store", str(tmp_path / "s.db"),
                     "-o", str(target), "--", *app("vec_add")], fake_env)
    doc = one_json(done.stdout)
    assert doc["status"] == "ok" and done.returncode == 0
    said = f"created the folder {target.parent} for the report"
    assert any(said in n for s in doc["steps"] if s["attempt"] for n in s["attempt"]["notes"])
    assert done.stderr.count(said) == 1


def test_a_newline_in_the_report_name_is_refused(fake_env, tmp_path, cli_here):
    done = cli_here(["run", "--json", "-o", str(tmp_path / "a\nb"), "--", *app("vec_add")], fake_env)
    doc = refused(done, "-o ", "control character")
    assert "export=" not in doc["error"]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OptionsError, match="control character"):
        ProfileOptions(export="a\nb")


def test_a_newline_in_the_default_report_folder_is_refused(tmp_path):
    config = run_config(tmp_path, report_dir=str(tmp_path / "x\ny"))
    with pytest.raises(OptionsError, match="control character"):
        plan_report(ProfileOptions(), app("vec_add"), config)


def test_a_dangling_symlink_as_the_report_is_refused(fake_env, tmp_path, cli_here):
    link = tmp_path / "r.ncu-rep"
    link.symlink_to(tmp_path / "elsewhere" / "x.ncu-rep")
    done = cli_here(["run", "--json", "-o", str(tmp_path / "r"), "--", *app("vec_add")], fake_env)
    refused(done, "symbolic link", "does not exist")
    assert not (tmp_path / "elsewhere").exists()


# --- empty kernel filters ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["run", "--json", "--kernel", ""],
    ["run", "--json", "--kernel-name", ""],
    ["run", "--json", "-o", ""],
    ["sweep-sections", "--json", "--kernel", ""],
])
def test_an_empty_value_is_a_usage_error(fake_env, args, cli_here):
    refused(cli_here([*args, "--", *app("vec_add")], fake_env), "must not be empty")


@pytest.mark.parametrize("text", ["", "regex:", "exact:"])
def test_an_empty_kernel_filter_is_refused(text):
    with pytest.raises(OptionsError, match="names no kernel"):
        KernelFilter.from_user(text)
    with pytest.raises(OptionsError):
        ProfileOptions(kernel=text)


def test_kernel_filter_of_nothing_raises():
    with pytest.raises(OptionsError):
        KernelFilter("")


def test_run_names_the_flag_of_an_empty_pattern(fake_env, cli_here):
    done = cli_here(["run", "--json", "--kernel", "regex:", "--", *app("vec_add")], fake_env)
    doc = refused(done, "--kernel 'regex:'", "names no kernel")
    assert "kernel=" not in doc["error"]


def test_sweep_sections_refuses_an_empty_kernel(fake_env, tmp_path):
    from nsightwrap.fallback.sweep import sweep_sections

    with pytest.raises(OptionsError, match="names no kernel"):
        sweep_sections(Session.open(app("vec_add"), run_config(tmp_path)), sections=("LaunchStats",), kernel="")


# --- the run record ----------------------------------------------------------------------------------------------

def test_a_refused_runtime_folder_is_a_warning(fake_env, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could write records there: refused
    config = run_config(tmp_path, env=dict(fake_env, NSIGHTWRAP_RUNTIME_DIR=str(shared)))
    attempt = profile_command(app("vec_add"), ProfileOptions(), config)
    assert attempt.status == "ok"
    assert any("cleanup` will not know this run" in w and str(shared) in w for w in attempt.warnings)
    assert attempt.to_dict()["warnings"] == list(attempt.warnings)


def test_a_private_runtime_folder_gives_no_warning(fake_env, tmp_path):
    config = run_config(tmp_path, env=dict(fake_env, NSIGHTWRAP_RUNTIME_DIR=str(tmp_path / "private")))
    attempt = profile_command(app("vec_add"), ProfileOptions(), config)
    assert attempt.status == "ok" and not any("run record" in w for w in attempt.warnings)


# --- flags, not parameter names ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, said, unsaid", [
    (["--launch-count", "0"], "--launch-count 0 would profile nothing; leave the option out", "launch_count"),
    (["--launch-skip", "-1"], "--launch-skip -1 must not be negative", "launch_skip"),
    (["--rank", "-2"], "--rank -2 must not be negative", "rank="),
    (["--export", "a\tb"], "--export 'a\\tb'", "export="),
])
def test_cli_messages_name_the_flags(fake_env, tmp_path, args, said, unsaid, cli_here):
    done = cli_here(["run", "--json", *args, "--", *app("vec_add")], fake_env, cwd=tmp_path)
    doc = refused(done, said)
    assert unsaid not in doc["error"] and "None" not in doc["error"] and said in done.stderr


def test_the_library_keeps_its_parameter_names():
    with pytest.raises(OptionsError, match="launch_count=0"):
        ProfileOptions(launch_count=0)


def test_in_flags_maps_once_in_the_cli_layer():
    parser = Parser(prog="x")
    parser.add_argument("--stall-timeout", type=float)
    parser.add_argument("-o", "--export")
    parser.add_argument("--kernel")
    parser.add_argument("--kernel-name")
    assert in_flags("stall_timeout must be > 0", parser, ["--stall-timeout", "0"]) == "--stall-timeout must be > 0"
    assert in_flags("export='' must be a non-empty string or None.", parser, ["-o", ""]) == \
        "-o '' must be a non-empty string."
    assert in_flags("export='' bad", parser, ["--export="]) == "--export '' bad"
    assert in_flags("KernelFilter.pattern='' bad", parser, ["--kernel-name", ""]) == "--kernel-name '' bad"
    assert in_flags("KernelFilter.pattern='' bad", parser, []) == "--kernel '' bad"
    # Names no option sets, and words that merely look alike, are left alone.
    kept = "wait_for_host hung; set NSIGHTWRAP_NCU=/x; graph_profiling='graph' needs kernel replay, or None"
    assert in_flags(kept, parser, []) == kept
    assert in_flags("stall_timeout", None, []) == "stall_timeout"
    assert isinstance(parser, argparse.ArgumentParser)


def test_in_flags_leaves_paths_and_python_hints_alone():
    """A parameter's name inside a path is part of the path (`/proc/stall_timeout/r` stayed no path), and a
    `NAME= in Python` hint names the parameter on purpose (`(export= in Python)` became `(-o in Python)`)."""
    parser = Parser(prog="x")
    parser.add_argument("--stall-timeout", type=float)
    parser.add_argument("-o", "--export")
    for kept in ("cannot write the report /proc/stall_timeout/r.ncu-rep (/proc/stall_timeout)",
                 "cannot run the program '/tmp/x/no_such/stall_timeout'",
                 "in stall_timeout/r.ncu-rep and ./stall_timeout and x/export=1",
                 "choose a place with -o/--export (export= in Python)",
                 "raise it (--stall-timeout SEC, or stall_timeout=SEC in Python)"):
        assert in_flags(kept, parser, ["-o", "/x"]) == kept
    assert in_flags("stall_timeout must be > 0 (at /tmp/stall_timeout)", parser, []) == \
        "--stall-timeout must be > 0 (at /tmp/stall_timeout)"
    assert in_flags("export=/tmp/r: bad", parser, ["-o", "/tmp/r"]) == "-o /tmp/r: bad"


@pytest.mark.parametrize("args, path", [
    (["-o", "/proc/stall_timeout/r.ncu-rep", "--", "/bin/true"], "/proc/stall_timeout/r.ncu-rep"),
    (["--", "/tmp/x/no_such/stall_timeout"], "/tmp/x/no_such/stall_timeout"),
])
def test_the_cli_leaves_a_path_that_holds_a_parameter_name_alone(fake_env, tmp_path, args, path, cli_here):
    done = cli_here(["run", "--json", *args], fake_env, cwd=tmp_path)
    doc = json.loads(done.stdout)
    assert done.returncode == 2 and path in doc["error"] and "--stall-timeout" not in doc["error"], doc
    assert "(-o in Python)" not in doc["error"]


def test_main_spells_library_errors_in_flags(fake_env, tmp_path, monkeypatch, capsys):
    from nsightwrap.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "--json", "--launch-count", "0", "--", *app("vec_add")]) == 2
    out, err = capsys.readouterr()
    assert "--launch-count 0" in json.loads(out)["error"] and "launch_count" not in err



def test_a_ladder_files_errors_keep_its_keys(fake_env, tmp_path, cli_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrungs:\n  - name: r\n    stall_timeout: 0\n")
    done = cli_here(["run", "--json", "--profile", str(bad), "--no-preflight", "--store", str(tmp_path / "s.db"), "--",
                *app("vec_add")], fake_env)
    doc = refused(done, "stall_timeout must be a number of seconds > 0")
    assert "--stall-timeout" not in doc["error"]


@pytest.mark.parametrize("args", [["--timeout", "-1"], ["--silence-timeout", "0"]])
def test_nsys_profile_refuses_a_bad_timeout_without_a_traceback(fake_env, args, cli_here):
    env = dict(fake_env, NSIGHTWRAP_NSYS=str(ROOT / "tests" / "fake_nsys" / "nsys"))
    done = cli_here(["nsys", "profile", *args, "--", "true"], env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and f"{args[0]}: must be > 0" in done.stderr


def test_in_flags_reads_the_options_of_the_sub_command_typed():
    parser = Parser(prog="x")
    nsys = parser.add_subparsers(dest="cmd").add_parser("profile")
    nsys.add_argument("--nsys")
    message = "nsys=: /x (does not exist)\nnsys= names '/x'; or pass nsys=/path/to/nsys."
    assert in_flags(message, parser, ["profile", "--nsys", "/x"]) == \
        "--nsys: /x (does not exist)\n--nsys names '/x'; or pass --nsys /path/to/nsys."
    assert in_flags(message, parser, ["other"]) == message

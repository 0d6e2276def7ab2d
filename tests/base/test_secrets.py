"""Issue 23, item 8: secrets in the profiled command are masked everywhere nsightwrap writes.

The rules (nsightwrap/secrets.py) are tested as a table; then a program whose
command line carries four secrets (``--token=``, ``--api-key VALUE``, a URL
password, ``HF_TOKEN=`` through ``env``) goes through run, run --profile,
sweep-sections and every hangs command, and no secret is found in any output
or any file nsightwrap wrote (the ncu reports are ncu's, not nsightwrap's).
The command actually run keeps the real values.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import FAKE_APP, STALL_S, cli_main

from nsightwrap.errors import NsightwrapError, StoreError
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.secrets import MASK, is_secret_name, mask_argv, mask_doc, mask_text
from nsightwrap.store import Environment, HangStore, ProfileKey
from nsightwrap.watch.records import RunRecord, read_records, write_record

SECRETS = ("s3cr3t-one", "s3cr3t-two", "s3cr3t-three", "s3cr3t-four")
H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")


# --- the rules -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, masked", [
    (["--token=abc"], ["--token=***"]),
    (["--token", "abc"], ["--token", "***"]),
    (["--api-key", "abc", "--verbose"], ["--api-key", "***", "--verbose"]),
    (["--password", "-dash-start"], ["--password", "***"]),
    (["--auth-token", "--verbose", "x"], ["--auth-token", "--verbose", "x"]),      # a flag, then a flag
    (["HF_TOKEN=abc", "AWS_SECRET_ACCESS_KEY=k", "PGPASSWORD=p"], ["HF_TOKEN=***", "AWS_SECRET_ACCESS_KEY=***",
                                                                   "PGPASSWORD=***"]),
    (["--db", "postgres://me:pw@host:5432/db"], ["--db", "postgres://me:***@host:5432/db"]),
    (["-H", "Authorization: Bearer abc.def"], ["-H", "Authorization: Bearer ***"]),
    (["--tokenizer", "gpt2", "--max-tokens", "5", "--kernel-name", "k", "-p", "8080", "a=b"],
     ["--tokenizer", "gpt2", "--max-tokens", "5", "--kernel-name", "k", "-p", "8080", "a=b"]),
    (["https://example.com/x?y=1", "--set", "full"], ["https://example.com/x?y=1", "--set", "full"]),
])
def test_mask_argv(argv, masked):
    assert mask_argv(argv) == masked
    assert mask_argv(mask_argv(argv)) == masked                  # masking twice changes nothing


def test_secret_names():
    for name in ("token", "--token", "HF_TOKEN", "api-key", "API_KEY", "apikey", "passwd", "PGPASSWORD",
                 "client_secret", "aws_credentials", "--auth", "GITHUB_TOKEN", "db.password"):
        assert is_secret_name(name), name
    for name in ("tokenizer", "max_tokens", "kernel-name", "monkeypatch", "author", "keyword", "PATH", "set"):
        assert not is_secret_name(name), name


def test_the_module_offers_only_what_the_package_uses():
    """mask_env masked nothing that nsightwrap writes (no caller but its test): gone, with its promise."""
    import nsightwrap.secrets as secrets

    assert set(secrets.__all__) == {"MASK", "is_secret_name", "mask_argv", "mask_doc", "mask_text"}
    assert not hasattr(secrets, "mask_env")


def test_mask_text_and_documents():
    text = "ran env HF_TOKEN=abc ./app --token=x1 --api-key x2 https://u:p@h/x --tokenizer gpt2"
    assert mask_text(text) == "ran env HF_TOKEN=*** ./app --token=*** --api-key *** https://u:***@h/x --tokenizer gpt2"
    doc = mask_doc({"command": ["./app", "--token", "x"], "notes": ["ran ./app --token=x"], "n": 3})
    assert doc == {"command": ["./app", "--token", "***"], "notes": ["ran ./app --token=***"], "n": 3}
    kernels = {"kernels": [{"name": "f<key=1>"}], "stall": {"kernel": "f<key=1>"}, "reason": "hung: f<key=1>"}
    assert mask_doc(kernels)["kernels"][0]["name"] == "f<key=1>" == mask_doc(kernels)["stall"]["kernel"]


def test_error_messages_are_masked():
    e = StoreError(None, "cannot run ./app --token=abc")
    assert str(e) == "cannot run ./app --token=***" and "abc" not in f"{e}"
    assert "abc" not in str(NsightwrapError("HF_TOKEN=abc"))


# --- the store keeps masked commands, and still matches them ---------------------------------------------------

def test_the_store_keeps_masked_commands_and_still_matches_them(tmp_path):
    program = ["./app", "--token", SECRETS[0], f"--db=postgres://u:{SECRETS[1]}@h/d"]
    key = ProfileKey("full")
    with HangStore(tmp_path / "h.db") as s:
        s.record("k", key, "hang", env=H200, command=["ncu", "--set", "full", *program],
                 note=f"stalled; ran with --token={SECRETS[2]}")
        s.record("k2", key, "no-kernels", env=H200, command=["ncu", *program])
        s.record_calibration(Calibration.from_kernels({"k": 0.5}, program_s=1.0, source="plain run"), program, H200)
        assert s.hanging_kernels(key, H200, program) == ["k"]
        assert s.profiled_nothing("k2", key, H200, program)
        assert s.calibration_for(program, H200) is not None
        assert s.records(kernel="k")[0].command[-3:] == ("--token", MASK, "--db=postgres://u:***@h/d")
    assert not _leaks(tmp_path)


def test_records_of_an_older_store_are_masked_when_read(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "h.db"
    HangStore(path).close()
    with HangStore(path) as s:
        s.record("k", ProfileKey("full"), "hang", env=H200, command=["./app"])
    with sqlite3.connect(path) as conn:                          # as a version without masking wrote it
        conn.execute("UPDATE records SET command = ?, note = ?",
                     (json.dumps(["./app", f"--token={SECRETS[0]}"]), f"HF_TOKEN={SECRETS[1]}"))
    code, out, err = cli_main(["hangs", "show", "k", "--json", "--store", str(path)], capsys)
    assert code == 0 and not _found(out + err)
    assert json.loads(out)["records"][0]["command"] == ["./app", "--token=***"]


def test_run_records_on_disk_are_masked(tmp_path):
    record = RunRecord(cookie="c", owner_pid=1, owner_start=None, root_pid=2, root_start=None,
                       argv=["ncu", "./app", "--token", SECRETS[0]])
    write_record(tmp_path, record)
    assert not _leaks(tmp_path)
    assert read_records(tmp_path)[0][1].argv[-1] == MASK


# --- every command, every output, every file -------------------------------------------------------------------

WRAPPER = textwrap.dedent("""
    # A program that takes secrets: drops them and runs the fake app's steps (exec: the same process).
    import os, sys
    args, steps = sys.argv[1:], []
    while args:
        a = args.pop(0)
        if a in ("--api-key", "--db"):
            value = args.pop(0)
            assert value.startswith(("s3cr3t", "postgres://")), value
        elif not a.startswith("--"):
            steps.append(a)
    assert os.environ.get("HF_TOKEN") == "s3cr3t-four"          # the command run keeps the real values
    os.execv(sys.executable, [sys.executable, sys.argv[0].replace("wrapper.py", "app.py"), *steps])
""")


def _program(tmp_path: Path, *steps: str) -> list[str]:
    """The fake app behind a wrapper that takes secrets (in tmp_path/bin, beside links to the fake app)."""
    folder = tmp_path / "bin"
    if not folder.exists():
        folder.mkdir()
        (folder / "wrapper.py").write_text(WRAPPER)
        (folder / "app.py").symlink_to(FAKE_APP)
        (folder / "fakecuda.py").symlink_to(FAKE_APP.parent / "fakecuda.py")
    return ["env", f"HF_TOKEN={SECRETS[3]}", sys.executable, str(folder / "wrapper.py"), f"--token={SECRETS[0]}",
            "--api-key", SECRETS[1], "--db", f"postgres://me:{SECRETS[2]}@db:5432/x", *steps]


def _found(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _leaks(folder: Path) -> list[str]:
    """Files under `folder` whose name or content holds a secret, but the fake program's own (bin/); of ncu's
    reports only the name (nsightwrap chooses it; the content is ncu's)."""
    bad = []
    for path in folder.rglob("*"):
        if path.is_file() and "bin" not in path.relative_to(folder).parts:
            data = "" if path.name.endswith(".ncu-rep") else path.read_bytes().decode("utf-8", "replace")
            bad += [f"{path}: {s}" for s in _found(data + str(path))]
    return bad


def test_no_secret_in_any_output_or_file(fake_env, tmp_path, capfd, monkeypatch):
    store, out = tmp_path / "hangs.db", []
    # Every command in this process (helpers.cli_main; a child `python -m nsightwrap` each cost ~0.5 s of CPU),
    # its output read at the file descriptors (capfd): what nsightwrap prints, what it writes round sys.stdout
    # and sys.stderr, and the output of ncu and of the program passing through.
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(store))
    monkeypatch.setenv("NSIGHTWRAP_RUNTIME_DIR", str(tmp_path / "rt"))
    monkeypatch.chdir(tmp_path)
    runs = [["run", "--json", "--verbose", "--calibrate", "-o", str(tmp_path / "r" / "one"), "--",
             *_program(tmp_path, "vec_add")],
            ["run", "--json", "--verbose", "--profile", "quick", "--stall-timeout", str(STALL_S), "-o",
             str(tmp_path / "r" / "walk"), "--", *_program(tmp_path, "vec_add", "k@hang", "vec_add")],
            ["sweep-sections", "--json", "--verbose", "--stall-timeout", str(STALL_S), "--section", "LaunchStats",
             "--section", "Occupancy", "--kernel", "k", "--markdown", str(tmp_path / "sweep.md"), "--",
             *_program(tmp_path, "k@hang")]]
    for argv in runs:
        _, stdout, stderr = cli_main(argv, capfd)
        assert "Traceback" not in stderr, stderr
        json.loads(stdout)
        out += [stdout, stderr]
    for argv in (["hangs", "list"], ["hangs", "show", "k", "--json"],
                 ["hangs", "show", "k", "--markdown"], ["hangs", "export", "--format", "csv"],
                 ["hangs", "export", "--format", "yaml"], ["hangs", "show", "k"]):
        code, stdout, stderr = cli_main(argv, capfd)
        assert code == 0, stderr
        out += [stdout, stderr]
    shown = stdout
    assert f"HF_TOKEN={MASK}" in shown and f"--token={MASK}" in shown and f"--api-key '{MASK}'" in shown
    assert "postgres://me:***@db" in shown
    assert [o[max(0, o.find("s3cr3t") - 300):o.find("s3cr3t") + 50] for o in out if _found(o)] == []
    assert os.path.getsize(store) > 0 and _leaks(tmp_path) == []
    with HangStore(store, readonly=True) as s:                   # the calibration was kept, masked, and is found
        assert s.calibration_for(_program(tmp_path, "vec_add"), Environment.detect()) is not None


@pytest.mark.parametrize("argv", [["--key-size", "1024"], ["--auth-mode", "x"], ["--token-file", "/tmp/t"],
                                  ["--pass-count=3"]])
def test_a_name_whose_last_word_says_what_the_value_is_is_no_secret(argv):
    """The review found `--key-size 1024` and `--key-size 65536` masked alike, so that two different runs
    shared one calibration in the store (the store keeps the masked command line)."""
    assert mask_argv(argv) == argv

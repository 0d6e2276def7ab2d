"""Issue 21 item 2: no secret reaches a hang bundle.

Secrets are planted everywhere the bundle reads from: the profiled command line (``--token=``, ``--password X``,
``*_TOKEN=`` through ``env``, a URL password, an ``Authorization:`` header), the program's output (so ncu's log
and the transcript), the stuck processes' command lines and stacks (a fake gdb and py-spy print them), the
store's notes, and nsightwrap's own environment (``*_TOKEN``, ``*_KEY``, ``*SECRET*``, ``*PASSWORD``). None of
the values appears in any file of the archive, nor in the run folders kept on disk; the masked forms do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import FAKE_APP, STALL_S, cli_main
from test_bundle import members, tools_on_path

SECRETS = {name: f"s3cr3t-{name}" for name in ("token", "password", "hf", "url", "bearer", "basic", "env-token",
                                                 "env-key", "env-secret", "env-pw", "stack", "header")}

WRAPPER = """\
import os, sys
# Drops the secret-bearing arguments and runs the fake app with the rest (a real program would use them).
argv = [a for a in sys.argv[1:] if not a.startswith(("--token=", "postgresql://", "Authorization:"))]
if "--password" in argv:
    i = argv.index("--password"); del argv[i:i + 2]
os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(__file__), "app.py"), *argv])
"""


def _program(tmp_path: Path) -> list[str]:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "wrapper.py").write_text(WRAPPER)
    (folder / "app.py").symlink_to(FAKE_APP)
    (folder / "fakecuda.py").symlink_to(FAKE_APP.parent / "fakecuda.py")
    s = SECRETS
    printed = (f"print:connecting to postgresql://me:{s['url']}@db/x with --password {s['password']} "
               f"Authorization: Bearer {s['bearer']}")
    return ["env", f"HF_TOKEN={s['hf']}", sys.executable, str(folder / "wrapper.py"), f"--token={s['token']}",
            "--password", s["password"], f"postgresql://me:{s['url']}@db:5432/x",
            f"Authorization: Basic {s['basic']}", printed, "vec_add", "k@hang"]


def test_no_planted_secret_appears_in_any_file_of_the_bundle(fake_env, tmp_path, capfd, monkeypatch):
    """The run and the bundle in this process (helpers.cli_main; a child `python -m nsightwrap` each cost ~0.5 s
    of CPU), nsightwrap's own environment this process's; test_bundle makes a bundle through a real process."""
    s = SECRETS
    stack_leak = f'; echo "#1 connect (password: {s["stack"]}) at db.c:12"; echo "X-Api-Key: {s["header"]}"'
    env = dict(NSIGHTWRAP_STORE=str(tmp_path / "hangs.db"), NSIGHTWRAP_EVIDENCE=str(tmp_path / "runs"),
               GITHUB_TOKEN=s["env-token"], CUDA_API_KEY=s["env-key"], NCCL_MY_SECRET_VALUE=s["env-secret"],
               PYTHON_DB_PASSWORD=s["env-pw"], PATH=f"{tools_on_path(tmp_path, extra=stack_leak)}:{fake_env['PATH']}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = cli_main(["run", "-q", "--json", "--profile", "quick", "--stall-timeout", str(STALL_S),
                                     "--", *_program(tmp_path)], capfd)
    assert json.loads(stdout)["hangs"][0][0] == "k", stdout
    out = tmp_path / "b.tar.gz"
    code, stdout, stderr = cli_main(["hangs", "bundle", "k", "-o", str(out)], capfd)
    assert code == 0, stderr
    files = members(out)
    leaks = [f"{name}: {secret}" for name, text in files.items() for secret in SECRETS.values() if secret in text]
    assert leaks == []
    kept = [f"{path}: {secret}" for path in (tmp_path / "runs").rglob("*") if path.is_file()
            for secret in SECRETS.values() if secret in path.read_text()]
    assert kept == []                                              # nor in the run folders the bundle was made from
    everything = "\n".join(files.values())
    # What was there is still there, masked: the bundle dropped nothing but the values.
    for masked in ("--token=***", "--password ***", "HF_TOKEN=***", "postgresql://me:***@db",
                   "Authorization: Basic ***", "Authorization: Bearer ***", "password: ***", "X-Api-Key: ***",
                   "CUDA_API_KEY=***", "NCCL_MY_SECRET_VALUE=***", "PYTHON_DB_PASSWORD=***"):
        assert masked in everything, masked
    assert "GITHUB_TOKEN" not in files["environment.txt"]          # not a variable that changes a CUDA run: left out
    assert any(n.endswith("/transcript.log") and "connecting to" in t for n, t in files.items())
    assert any("/stall/stack-" in n and "db.c:12" in t for n, t in files.items())
    assert "Secret values are replaced by `***`" in files["README.md"]

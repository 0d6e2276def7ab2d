"""`make run`'s program on a machine without PyTorch: nvcc builds the example, the table is printed;
where something is missing it says what, without a traceback (fake ncu, fake nvcc)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import FAKE_APP
from helpers import without_ncu_anywhere

ROOT = Path(__file__).resolve().parents[2]
MAKE_RUN = ROOT / "examples" / "make_run.py"


def fake_nvcc(folder: Path) -> Path:
    """An nvcc whose "binary" runs the fake CUDA program (the fake ncu profiles it)."""
    folder.mkdir()
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/bin/sh\n"
                    "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                    f"printf '#!/bin/sh\\nexec {sys.executable} {FAKE_APP} "
                    "fill fill vec_add scale block_sum\\n' > \"$out\"\n"
                    "chmod +x \"$out\"\n")
    nvcc.chmod(0o755)
    return folder


def make_run(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(env, PYTHONPATH=str(ROOT), MAKE_RUN_BUILD=str(tmp_path / "build"))
    return subprocess.run([sys.executable, str(MAKE_RUN)], capture_output=True, text=True, env=env, timeout=180,
                          cwd=tmp_path)


def make_run_here(tmp_path: Path, monkeypatch, capfd) -> tuple[int, str, str]:
    """make_run.py's main() in this process (its interpreter's start and pandas saved; `nsightwrap run` stays a
    process of its own): (exit code, stdout, stderr), the file descriptors' too."""
    import importlib.util

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MAKE_RUN_BUILD", str(tmp_path / "build"))  # read when the module loads
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("make_run_example", MAKE_RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capfd.readouterr()
    code = module.main()
    out, err = capfd.readouterr()
    return code, out, err


def test_make_run_builds_the_cuda_example_and_prints_the_kernel_table(fake_env, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PATH", f"{fake_nvcc(tmp_path / 'bin')}{os.pathsep}{fake_env['PATH']}")
    code, out, err = make_run_here(tmp_path, monkeypatch, capfd)
    assert code == 0, err
    assert "examples/kernels.cu built with" in err
    assert (tmp_path / "build" / "examples" / "kernels").exists()
    assert "5 kernel launch(es) profiled" in out
    header = out.splitlines()[3]
    assert "function" in header and "gpu__time_duration.sum [ns]" in header  # read back from the report
    assert "Traceback" not in err


def test_make_run_without_ncu_says_what_is_missing(tmp_path):
    without_ncu_anywhere()
    env = {"PATH": f"{fake_nvcc(tmp_path / 'bin')}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path),
           "NSIGHTWRAP_CACHE_DIR": str(tmp_path / "c")}
    done = make_run(env, tmp_path)
    assert done.returncode == 2 and "ncu was not found" in done.stderr and "Traceback" not in done.stderr

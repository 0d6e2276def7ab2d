"""Building the CUPTI tracer: a fake compiler and toolkit; fail-over to a reason, the per-user cache, one build."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nsightwrap.calibrate.cupti.build import (
    LIBRARY,
    SOURCE,
    Cupti,
    compile_command,
    cuda_roots,
    find_compiler,
    find_cupti,
    find_tracer,
    tracer_status,
)

FAKE_CXX = """#!{python}
import os, sys, time
if "--version" in sys.argv:
    print("fakec++ (FAKE) 1.0")
    sys.exit(0)
with open(os.environ["FAKE_CXX_LOG"], "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_CXX_FAIL"):
    sys.stderr.write("tracer.cpp:3:1: error: 'CUpti_Foo' was not declared in this scope\\n")
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_CXX_SLEEP", "0")))
out = sys.argv[sys.argv.index("-o") + 1]
with open(out, "w") as f:
    f.write("ELF")
"""


def toolkit(root: Path, *, cupti_h: str = "#define CUPTI_API_VERSION 130000\n", cuda_h: bool = True) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "targets" / "x86_64-linux" / "lib").mkdir(parents=True)
    if cupti_h is not None:
        (root / "include" / "cupti.h").write_text(cupti_h)
    if cuda_h:
        (root / "include" / "cuda.h").write_text("/* cuda.h */\n")
    (root / "targets" / "x86_64-linux" / "lib" / "libcupti.so.13").write_text("")
    return root


@pytest.fixture
def box(tmp_path):
    """A fake compiler on an otherwise empty PATH, a fake toolkit, a private cache; env and roots."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cxx = bin_dir / "g++"
    cxx.write_text(FAKE_CXX.format(python=sys.executable))
    cxx.chmod(0o755)
    log = tmp_path / "cxx.log"
    env = {"PATH": str(bin_dir), "XDG_CACHE_HOME": str(tmp_path / "cache"), "FAKE_CXX_LOG": str(log),
           "HOME": str(tmp_path)}
    root = toolkit(tmp_path / "cuda-13.0")
    return env, [root], log


def compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_off_and_a_prebuilt_library(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_text("")
    assert find_tracer({"NSIGHTWRAP_TRACER": str(lib)}).path == lib
    assert find_tracer({"NSIGHTWRAP_TRACER": str(lib)}).how == "prebuilt"
    off = find_tracer({"NSIGHTWRAP_TRACER": "off"})
    assert off.path is None and "off" in off.reason
    missing = find_tracer({"NSIGHTWRAP_TRACER": str(tmp_path / "nope.so")})
    assert missing.path is None and "no such file" in missing.reason


def test_built_once_then_cached_in_a_private_folder(box):
    env, roots, log = box
    first = find_tracer(env, roots=roots)
    assert first.how == "built" and first.path.name == LIBRARY and first.path.is_file()
    second = find_tracer(env, roots=roots)
    assert second.how == "cached" and second.path == first.path and compiles(log) == 1
    folder = first.path.parent
    assert folder.parent == Path(env["XDG_CACHE_HOME"]) / "nsightwrap" / "tracer"
    for f in (folder, folder.parent):
        assert stat.S_IMODE(f.stat().st_mode) == 0o700
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert tracer_status(env, roots=roots).how == "cached"


def test_another_cupti_version_is_another_build(box, tmp_path):
    env, roots, log = box
    first = find_tracer(env, roots=roots)
    other = toolkit(tmp_path / "cuda-12.8", cupti_h="#define CUPTI_API_VERSION 120800\n")
    second = find_tracer(env, roots=[other])
    assert second.how == "built" and second.path != first.path and compiles(log) == 2


def test_two_concurrent_builds_compile_once(box):
    env, roots, log = box
    env["FAKE_CXX_SLEEP"] = "0.5"
    got = []
    threads = [threading.Thread(target=lambda: got.append(find_tracer(env, roots=roots))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert compiles(log) == 1
    assert sorted(b.how for b in got) == ["built", "cached"] and got[0].path == got[1].path


def test_no_compiler_is_a_reason_not_a_traceback(box, tmp_path):
    env, roots, log = box
    empty = tmp_path / "empty"
    empty.mkdir()
    got = find_tracer(dict(env, PATH=str(empty)), roots=roots)
    assert got.path is None and got.reason.startswith("no C++ compiler") and "NSIGHTWRAP_TRACER" in got.reason
    assert "\n" not in got.reason


def test_nvcc_is_the_last_resort(tmp_path):
    root = toolkit(tmp_path / "cuda")
    (root / "bin").mkdir()
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find_compiler({"PATH": str(empty)}, [root]) == str(nvcc)


def test_missing_headers_are_a_reason(box, tmp_path):
    env, _, log = box
    no_cupti = toolkit(tmp_path / "bare", cupti_h=None)
    got = find_tracer(env, roots=[no_cupti])
    assert got.path is None and "cupti.h" in got.reason and "CUDA_HOME" in got.reason and compiles(log) == 0
    no_cuda_h = toolkit(tmp_path / "half", cuda_h=False)
    assert find_cupti([no_cuda_h])[0] is None


def test_a_compile_error_is_one_line_and_not_retried(box):
    env, roots, log = box
    env["FAKE_CXX_FAIL"] = "1"
    got = find_tracer(env, roots=roots)
    assert got.path is None and got.reason.startswith("compiling the CUPTI tracer failed (g++)")
    assert "was not declared" in got.reason and "\n" not in got.reason
    again = find_tracer(env, roots=roots)
    assert again.reason.startswith(got.reason) and compiles(log) == 1  # remembered under its key
    assert "remembered in" in again.reason and "tried again 1 h after" in again.reason  # review: say how
    mark = next(Path(env["XDG_CACHE_HOME"]).rglob("build-error.txt"))
    old = mark.stat().st_mtime - 2 * 3600
    os.utime(mark, (old, old))  # an hour on (a missing package installed since, say): tried again
    find_tracer(env, roots=roots)
    assert compiles(log) == 2
    assert tracer_status(env, roots=roots).path is None


def test_status_does_not_build(box):
    env, roots, log = box
    got = tracer_status(env, roots=roots)
    assert got.how == "buildable" and got.path is None and compiles(log) == 0


def test_the_command_lines():
    cupti = Cupti(("/cuda/include",), "/cuda/targets/x86_64-linux/lib", Path("/cuda/include/cupti.h"))
    assert compile_command("/usr/bin/g++", Path("t.cpp"), Path("o.so"), cupti) == [
        "/usr/bin/g++", "-shared", "-fPIC", "-O2", "-I/cuda/include", "t.cpp", "-o", "o.so",
        "-L/cuda/targets/x86_64-linux/lib", "-Wl,-rpath,/cuda/targets/x86_64-linux/lib", "-lcupti", "-ldl",
        "-pthread"]
    nvcc = compile_command("/cuda/bin/nvcc", Path("t.cpp"), Path("o.so"), cupti)
    assert nvcc[:5] == ["/cuda/bin/nvcc", "-shared", "-Xcompiler", "-fPIC", "-O2"]
    assert "-rpath=/cuda/targets/x86_64-linux/lib" in nvcc and "-lcupti" in nvcc


def test_cuda_home_comes_first(tmp_path):
    roots = cuda_roots({"CUDA_HOME": str(tmp_path)})
    assert roots[0] == tmp_path and Path("/usr/local/cuda") in roots


def _real_toolkit():
    cxx = shutil.which("g++")
    cupti, _ = find_cupti(cuda_roots(os.environ))
    return cxx, cupti


@pytest.mark.skipif(None in _real_toolkit(), reason="needs g++ and CUPTI's headers (a CUDA toolkit)")
def test_the_real_tracer_compiles_with_gxx(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), CXX="g++")
    env.pop("NSIGHTWRAP_TRACER", None)
    got = find_tracer(env)
    assert got.how == "built", got.reason
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(got.path)], capture_output=True, text=True).stdout
    assert "InitializeInjection" in symbols
    assert SOURCE.is_file()


def test_the_tracer_source_ships_as_package_data():
    import tomllib

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "calibrate/cupti/tracer.cpp" in data["nsightwrap"]
    assert SOURCE == root / "nsightwrap" / "calibrate" / "cupti" / "tracer.cpp"
    assert "InitializeInjection" in SOURCE.read_text()


def test_describe_says_which_tracer_or_why_none(box, tmp_path):
    env, roots, _ = box
    assert tracer_status(env, roots=roots).describe().startswith("the CUPTI tracer can be built (g++, CUPTI in ")
    assert find_tracer(env, roots=roots).describe().startswith("the CUPTI tracer (built): ")
    assert find_tracer({"NSIGHTWRAP_TRACER": "off"}).describe() == ("no CUPTI tracer: the CUPTI tracer is off "
                                                                    "(NSIGHTWRAP_TRACER=off)")


def test_a_cache_that_cannot_be_written_is_a_reason(box, tmp_path):
    env, roots, log = box
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    got = find_tracer(dict(env, XDG_CACHE_HOME=str(blocker)), roots=roots)
    assert got.path is None and "cannot be written" in got.reason and compiles(log) == 0

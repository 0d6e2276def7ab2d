"""Build the CUPTI tracer once per machine and CUDA version, cached per user; fail over to a reason.

tracer.cpp is compiled with the first C++ compiler found (g++, c++, clang++,
nvcc as a last resort) against the CUPTI of the installed toolkit
(CUDA_HOME, /usr/local/cuda, /usr/local/cuda-*; FACTS.md "Timing kernels
without ncu": cupti.h and libcupti.so under targets/x86_64-linux/) into
``$XDG_CACHE_HOME/nsightwrap/tracer/<key>/libnsightwrap_tracer.so``, key =
hash of the source, the compiler's version and cupti.h. Concurrent runs
build it once (a file lock; a temp name renamed into place). No compiler,
no headers, a compile error: no tracer and a one-line reason, never a
traceback (a failed compile is remembered under its key, so it is not
retried for every calibration). ``NSIGHTWRAP_TRACER=/path/lib.so`` uses a
prebuilt library, ``NSIGHTWRAP_TRACER=off`` disables the tracer.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from nsightwrap.paths import make_private_dirs, tracer_dir

__all__ = ["LIBRARY", "SOURCE", "TRACER_VAR", "Cupti", "TracerBuild", "build_key", "compile_command",
           "cuda_roots", "find_compiler", "find_cupti", "find_tracer", "tracer_status"]

TRACER_VAR = "NSIGHTWRAP_TRACER"
LIBRARY = "libnsightwrap_tracer.so"
SOURCE = Path(__file__).with_name("tracer.cpp")
COMPILERS = ("g++", "c++", "clang++")
#: A first build of a small injection library takes seconds; this bounds a compiler that hangs.
COMPILE_TIMEOUT_S = 300.0
FAILED_MARK = "build-error.txt"
REMEDY = "set NSIGHTWRAP_TRACER=/path/to/libnsightwrap_tracer.so to use a prebuilt one"

Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class Cupti:
    """Where the toolkit's CUPTI is: the include folders (cupti.h, cuda.h), the library folder, cupti.h."""

    include_dirs: tuple[str, ...]
    lib_dir: str
    header: Path


@dataclass(frozen=True)
class TracerBuild:
    """The tracer library to inject (None: none, and `reason` says why in one line).

    how: "prebuilt" (NSIGHTWRAP_TRACER), "cached", "built" now, "buildable" (tracer_status: it would be
    built on first use), or "" when there is none.
    """

    path: Optional[Path]
    how: str = ""
    reason: str = ""

    def describe(self) -> str:
        """One line: which tracer, or why there is none."""
        if self.how == "buildable":
            return f"the CUPTI tracer can be built ({self.reason})"
        if self.path is not None:
            return f"the CUPTI tracer ({self.how}): {self.path}"
        return f"no CUPTI tracer: {self.reason}"


def cuda_roots(env: Mapping[str, str]) -> list[Path]:
    """Toolkit folders to look in: CUDA_HOME, CUDA_PATH, /usr/local/cuda, /usr/local/cuda-* (newest first)."""
    given = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    found = sorted(Path("/usr/local").glob("cuda-*"), key=lambda p: _version(p.name), reverse=True)
    roots: list[Path] = []
    for p in [Path(g) for g in given if g] + found:
        if p not in roots:
            roots.append(p)
    return roots


def _version(name: str) -> tuple[int, ...]:
    digits = name.split("-", 1)[-1].split(".")
    return tuple(int(d) for d in digits if d.isdigit())


def _first_with(dirs: Sequence[Path], pattern: str) -> Optional[Path]:
    return next((d for d in dirs if d.is_dir() and any(d.glob(pattern))), None)


def find_cupti(roots: Sequence[Path]) -> tuple[Optional[Cupti], str]:
    """(Cupti, "") from the first toolkit with cupti.h, cuda.h and libcupti.so; else (None, why)."""
    for root in roots:
        incs = [root / "include", root / "extras" / "CUPTI" / "include", root / "targets" / "x86_64-linux" / "include"]
        libs = [root / "lib64", root / "extras" / "CUPTI" / "lib64", root / "targets" / "x86_64-linux" / "lib"]
        cupti_inc, cuda_inc = _first_with(incs, "cupti.h"), _first_with(incs, "cuda.h")
        lib = _first_with(libs, "libcupti.so*")
        if cupti_inc and cuda_inc and lib:
            dirs = tuple(dict.fromkeys(str(d) for d in (cupti_inc, cuda_inc)))
            return Cupti(dirs, str(lib), cupti_inc / "cupti.h"), ""
    where = ", ".join(str(r) for r in roots) or "no CUDA toolkit folder"
    return None, (f"CUPTI's headers and library (cupti.h, cuda.h, libcupti.so) were not found in {where}: "
                  "install the CUDA toolkit or set CUDA_HOME")


def find_compiler(env: Mapping[str, str], roots: Sequence[Path]) -> Optional[str]:
    """$CXX, else g++, c++, clang++ on PATH, else a toolkit's nvcc (as a driver of the host compiler)."""
    path = env.get("PATH", os.defpath)
    for name in ([env["CXX"]] if env.get("CXX") else []) + list(COMPILERS):
        found = shutil.which(name, path=path)
        if found:
            return found
    nvcc = shutil.which("nvcc", path=path)
    if nvcc:
        return nvcc
    return next((str(r / "bin" / "nvcc") for r in roots if os.access(r / "bin" / "nvcc", os.X_OK)), None)


def compile_command(cxx: str, source: Path, out: Path, cupti: Cupti) -> list[str]:
    """The compiler's command line (pure): a shared library linked to libcupti with an rpath to it."""
    includes = [f"-I{d}" for d in cupti.include_dirs]
    if Path(cxx).name.startswith("nvcc"):
        return [cxx, "-shared", "-Xcompiler", "-fPIC", "-O2", *includes, str(source), "-o", str(out),
                f"-L{cupti.lib_dir}", "-Xlinker", f"-rpath={cupti.lib_dir}", "-lcupti", "-ldl",
                "-Xcompiler", "-pthread"]
    return [cxx, "-shared", "-fPIC", "-O2", *includes, str(source), "-o", str(out), f"-L{cupti.lib_dir}",
            f"-Wl,-rpath,{cupti.lib_dir}", "-lcupti", "-ldl", "-pthread"]


def build_key(source: bytes, compiler_version: str, header: bytes) -> str:
    """What the library depends on: the source, the compiler's version, cupti.h (CUPTI's version)."""
    h = hashlib.sha256()
    for part in (source, compiler_version.encode(), header):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:20]


def _first_line(text: str, limit: int = 240) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "no output")
    return pick[:limit]


def _compiler_version(cxx: str, run: Run, env: Mapping[str, str]) -> tuple[Optional[str], str]:
    try:
        done = run([cxx, "--version"], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"the C++ compiler {cxx} does not run ({e})"
    if done.returncode != 0:
        return None, f"the C++ compiler {cxx} does not run: {_first_line(done.stderr + done.stdout)}"
    return (done.stdout.strip() or done.stderr.strip() or cxx), ""


def _compile(cxx: str, cupti: Cupti, folder: Path, run: Run, env: Mapping[str, str]) -> str:
    """Compile into folder/LIBRARY through a temp name; "" when built, else the one-line reason (remembered)."""
    tmp = folder / f".{LIBRARY}.{os.getpid()}.tmp"
    try:
        done = run(compile_command(cxx, SOURCE, tmp, cupti), capture_output=True, text=True,
                   timeout=COMPILE_TIMEOUT_S, env=dict(env))
        if done.returncode == 0 and tmp.is_file():
            os.replace(tmp, folder / LIBRARY)
            return ""
        why = f"compiling the CUPTI tracer failed ({Path(cxx).name}): {_first_line(done.stderr + done.stdout)}"
    except (OSError, subprocess.SubprocessError) as e:
        why = f"compiling the CUPTI tracer failed ({Path(cxx).name}): {e}"
    finally:
        tmp.unlink(missing_ok=True)
    (folder / FAILED_MARK).write_text(why + "\n")
    return why


#: A failed build is not tried again for this long (each calibration would pay the compiler's time), then it is.
RETRY_FAILED_S = 3600.0


def _failed_before(mark: Path, now: Optional[float] = None) -> str:
    """The remembered reason of a failed build of this key, with how to try again; "" when there is none, or
    it is old enough to try again (a missing package installed since, say)."""
    try:
        age = (time.time() if now is None else now) - mark.stat().st_mtime
        if age >= RETRY_FAILED_S:
            return ""
        why = _first_line(mark.read_text(errors="replace"))
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as e:
        return f"the tracer cache {mark.parent} cannot be read ({e})"
    return (f"{why} (remembered in {mark}; it is tried again {RETRY_FAILED_S / 3600:g} h after, or now once that "
            "file is removed)")


def _given(value: str) -> TracerBuild:
    if value.lower() == "off":
        return TracerBuild(None, reason=f"the CUPTI tracer is off ({TRACER_VAR}=off)")
    if not os.path.isfile(value):
        return TracerBuild(None, reason=f"{TRACER_VAR}={value}: no such file (give the built "
                                        f"{LIBRARY}, or unset it to build one)")
    return TracerBuild(Path(value), "prebuilt")


def _prepare(env: Mapping[str, str], roots: Optional[Sequence[Path]],
             run: Run) -> tuple[Optional[tuple[str, Cupti, Path]], str]:
    """(compiler, CUPTI, the key's cache folder) or (None, why there can be no tracer)."""
    roots = cuda_roots(env) if roots is None else list(roots)
    cxx = find_compiler(env, roots)
    if cxx is None:
        return None, f"no C++ compiler ({', '.join(COMPILERS)} or nvcc) was found: install g++, or {REMEDY}"
    cupti, why = find_cupti(roots)
    if cupti is None:
        return None, why
    version, why = _compiler_version(cxx, run, env)
    if version is None:
        return None, why
    try:
        key = build_key(SOURCE.read_bytes(), version, cupti.header.read_bytes())
    except OSError as e:
        return None, f"the tracer's source or cupti.h cannot be read ({e})"
    return (cxx, cupti, tracer_dir(env) / key), ""


def find_tracer(env: Mapping[str, str], *, roots: Optional[Sequence[Path]] = None, build: bool = True,
                run: Run = subprocess.run) -> TracerBuild:
    """The tracer to inject: given, cached, else built now (build=False: say whether it could be)."""
    if env.get(TRACER_VAR):
        return _given(env[TRACER_VAR])
    ready, why = _prepare(env, roots, run)
    if ready is None:
        return TracerBuild(None, reason=why)
    cxx, cupti, folder = ready
    if (folder / LIBRARY).is_file():
        return TracerBuild(folder / LIBRARY, "cached")
    failed = _failed_before(folder / FAILED_MARK)
    if failed:
        return TracerBuild(None, reason=failed)
    if not build:
        return TracerBuild(None, "buildable", f"{Path(cxx).name}, CUPTI in {cupti.lib_dir}; built on first use")
    try:
        make_private_dirs(folder)
        with open(folder / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent run builds it; this one then finds it
            if (folder / LIBRARY).is_file():
                return TracerBuild(folder / LIBRARY, "cached")
            why = _compile(cxx, cupti, folder, run, env)
    except OSError as e:
        return TracerBuild(None, reason=f"the tracer cache {folder} cannot be written ({e})")
    return TracerBuild(folder / LIBRARY, "built") if not why else TracerBuild(None, reason=why)


def tracer_status(env: Mapping[str, str], *, roots: Optional[Sequence[Path]] = None,
                  run: Run = subprocess.run) -> TracerBuild:
    """What find_tracer would give, without compiling anything (doctor)."""
    return find_tracer(env, roots=roots, build=False, run=run)

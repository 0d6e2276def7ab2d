"""The checks of `doctor`, each a small object answering one question with a line and a remedy.

`doctor` runs them all; `run --profile` and `sweep-sections` run the cheap
ones first (the counter probe's success is cached per ncu, driver, user and
boot), and refuse to start a long walk that could only fail.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from nsightwrap.calibrate.cupti.build import TRACER_VAR, tracer_status
from nsightwrap.errors import NsightwrapError, StoreError
from nsightwrap.ncu.attempt import COUNTERS_REMEDY
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.listen import SILENT
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.paths import make_private_dirs, tools_dir, work_dir
from nsightwrap.store.check import store_problem
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import StoreLocation, StoreUnreachable, local_default, resolve_store
from nsightwrap.store.paths import repair_sidecars
from nsightwrap.watch import cudaprobe, gpu
from nsightwrap.watch.files import folder_problem
from nsightwrap.watch.locate import version_key
from nsightwrap.watch.orphans import find_orphans

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"

#: Which CUDA toolkit ships each Nsight Compute release, and the least Linux x86_64 driver that toolkit
#: needs. Toolkit <-> ncu: NVIDIA's conda channel labels (cuda-13.0.1 / 13.0.2 -> nsight-compute
#: 2025.3.1.4, ...); drivers: "CUDA Toolkit and Corresponding Driver Versions" in the CUDA Toolkit
#: release notes (GA releases). No ncu release note found gives its own driver floor; newer drivers work.
NCU_DRIVERS: tuple[tuple[str, str, str], ...] = (
    ("2022.4", "12.0", "525.60.13"),
    ("2023.1", "12.1", "530.30.02"),
    ("2023.2", "12.2", "535.54.03"),
    ("2023.3", "12.3", "545.23.06"),
    ("2024.1", "12.4", "550.54.14"),
    ("2024.2", "12.5", "555.42.02"),
    ("2024.3", "12.6", "560.28.03"),
    ("2025.1", "12.8", "570.26"),
    ("2025.2", "12.9", "575.51.03"),
    ("2025.3", "13.0", "580.65.06"),
    ("2025.4", "13.1", "590.44.01"),
)

@dataclass(frozen=True)
class Check:
    """One answer: ok, warn, FAIL or skip, what was found, and what to do."""

    name: str
    status: str
    detail: str
    remedy: str = ""

    def line(self) -> str:
        text = f"{self.status:<5} {self.name:<11} {self.detail}"
        return text + (f"\n{'':<17} -> {self.remedy}" if self.remedy else "")


@dataclass
class Facts:
    """What the checks share, found once: the run context (or why there is none), the GPUs."""

    context: Optional[RunContext]
    ncu_problem: str
    gpus: Optional[list]
    store: Union[Path, StoreLocation]  # a file, or the location of a database
    env: dict

    @classmethod
    def gather(cls, context_of: Callable[[], RunContext], store: Optional[str] = None) -> "Facts":
        try:
            context, problem = context_of(), ""
            _ = context.info  # probed (cached) now, so a broken ncu is one line here
        except NsightwrapError as e:
            context, problem = None, str(e)
        env = dict(context.env) if context else dict(os.environ)
        location = resolve_store(store, env)
        path = location.path or location
        return cls(context, problem, context.gpus if context else gpu.gpus(), path, env)


def check_ncu(f: Facts) -> Check:
    if f.context is None:
        lines = f.ncu_problem.splitlines() or ["not usable"]
        looked = [x.strip(" -").split(" (")[0] for x in lines if x.startswith("  - ")]
        detail = lines[0] + (f" Looked in: {', '.join(looked)}." if looked else "")
        return Check("ncu", FAIL, detail, lines[-1] if len(lines) > 1 else "install Nsight Compute")
    info = f.context.info
    return Check("ncu", OK, f"{f.context.ncu} (version {info.version}; {len(info.sets)} sets, "
                            f"{len(info.sections)} sections)")


def check_driver(f: Facts) -> Check:
    if f.gpus is None:
        return Check("driver", FAIL, "nvidia-smi not found or failing: no NVIDIA driver here, so nothing can be "
                                     "profiled on this machine",
                     "run on a machine with an NVIDIA GPU and its driver (the tests still run here: `make test`)")
    if not f.gpus:
        return Check("driver", FAIL, "nvidia-smi lists no GPU", "check `nvidia-smi -L` and CUDA_VISIBLE_DEVICES")
    names = sorted({g.name for g in f.gpus})
    return Check("driver", OK, f"{len(f.gpus)} GPU(s): {', '.join(names)}; driver {f.gpus[0].driver}")


def driver_floor(ncu_version: str) -> Optional[tuple[str, str]]:
    """(CUDA toolkit, least driver) for an ncu version, from NCU_DRIVERS; None when not in the table."""
    release = ".".join(ncu_version.split(".")[:2])
    return next(((cuda, driver) for ncu, cuda, driver in NCU_DRIVERS if ncu == release), None)


def check_ncu_driver(f: Facts) -> Check:
    if f.context is None or not f.gpus:
        return Check("ncu/driver", SKIP, "needs both ncu and a driver")
    version, driver = f.context.info.version, f.gpus[0].driver
    floor = driver_floor(version)
    if floor is None:
        return Check("ncu/driver", SKIP, f"ncu {version} is not in nsightwrap's table (2022.4 to 2025.4); "
                                         "cannot say which driver it needs")
    cuda, least = floor
    if version_key(driver) < version_key(least):
        return Check("ncu/driver", WARN, f"driver {driver} is older than {least}, the least driver of CUDA {cuda}, "
                                         f"with which ncu {version} ships",
                     f"update the driver to >= {least}, or use the ncu of a CUDA toolkit as old as the driver "
                     "(--ncu PATH or NSIGHTWRAP_NCU)")
    return Check("ncu/driver", OK, f"ncu {version} ships with CUDA {cuda} (driver >= {least}); driver {driver}")


def _counters_cache(f: Facts) -> Path:
    return tools_dir(f.env) / "preflight-counters.json"


def _counters_key(f: Facts) -> dict:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    ncu = f.context.ncu if f.context else ""
    try:
        mtime = os.stat(ncu).st_mtime if ncu else 0
    except OSError:
        mtime = 0
    return {"ncu": ncu, "mtime": mtime, "driver": f.gpus[0].driver if f.gpus else "", "uid": os.getuid(),
            "boot": boot}


class CounterProbe:
    """May this user read the GPU's performance counters? One kernel under ncu says (ERR_NVGPUCTRPERM).

    A success is cached (per ncu, driver, user and boot): only a reboot or a
    driver reload changes it. A refusal is asked again each time, so the fix
    is seen at once.
    """

    def __init__(self, program: Optional[Sequence[str]] = None, use_cache: bool = True) -> None:
        self.program = list(program) if program else [sys.executable, cudaprobe.__file__]
        self.use_cache = use_cache

    def __call__(self, f: Facts) -> Check:
        if f.context is None or not f.gpus:
            return Check("counters", SKIP, "needs both ncu and a GPU")
        cache, key = _counters_cache(f), _counters_key(f)
        if self.use_cache and self._cached(cache) == key:
            return Check("counters", OK, "this user may read the GPU performance counters (checked before)")
        tmp = work_dir("preflight")  # one that a SIGKILL leaves is removed by the next run or `cleanup`
        try:
            context = f.context.replace(stall_timeout=30.0, timeout=120.0, check_gpu=False, report_dir=str(tmp))
            context = context.with_listener(SILENT)  # not one of the run's attempts
            attempt = profile_command(self.program, ProfileOptions(metrics=("gpu__time_duration.sum",),
                                                                   launch_count=1), context)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if any("ERR_NVGPUCTRPERM" in e for e in attempt.errors):
            return Check("counters", FAIL, "ERR_NVGPUCTRPERM: this user may not read the GPU performance "
                                           "counters, so ncu can profile nothing", COUNTERS_REMEDY)
        if attempt.status != OK or not attempt.kernels:
            return Check("counters", WARN, f"the one-kernel probe was inconclusive ({attempt.status}: "
                                           f"{attempt.reason.splitlines()[0][:200]})",
                         "run `python -m nsightwrap run --metrics gpu__time_duration.sum -- YOUR_PROGRAM` to see "
                         "what ncu says")
        self._store(cache, key)
        return Check("counters", OK, f"this user may read the GPU performance counters (one kernel profiled in "
                                     f"{attempt.elapsed_s:.1f} s)")

    @staticmethod
    def _cached(cache: Path) -> Optional[dict]:
        try:
            return json.loads(cache.read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _store(cache: Path, key: dict) -> None:
        try:
            make_private_dirs(cache.parent)
            cache.write_text(json.dumps(key))
        except OSError:
            pass  # a cache that cannot be written only costs a probe next time


def check_gpu_processes(f: Facts) -> Check:
    held = gpu.compute_processes()
    if f.context is not None:  # the first attempt's look for foreign processes, when it starts soon
        f.context.gpu_listing.put(held)
    if held is None:
        return Check("gpu procs", SKIP, "nvidia-smi cannot list compute processes here")
    if held:
        listed = ", ".join(f"{p.pid} ({p.name}, {p.used_memory})" for p in held[:5])
        return Check("gpu procs", WARN, f"{len(held)} compute process(es) already on the GPU: {listed}",
                     "wait for them or stop them: a hang recorded while they run may be theirs")
    orphans = find_orphans()
    if orphans:
        return Check("gpu procs", WARN, "processes of a killed nsightwrap are still alive: "
                                        + ", ".join(str(p.pid) for p in orphans),
                     "run `python -m nsightwrap cleanup`")
    return Check("gpu procs", OK, "no other compute process on the GPU")


def _importer(nsys: str) -> Optional[Path]:
    """QdstrmImporter beside nsys (it turns the raw trace into a .nsys-rep)."""
    root = Path(nsys).resolve().parent.parent
    found = sorted(root.glob("*/QdstrmImporter"))
    return found[0] if found else None


def check_nsys(f: Facts) -> Check:
    try:
        nsys = find_nsys(env=f.env)
    except NsightwrapError:
        return Check("nsys", SKIP, "not found: `python -m nsightwrap nsys` cannot run, and calibration cannot "
                                   "use it (the timing check says what it uses)",
                     "install Nsight Systems, or set NSIGHTWRAP_NSYS")
    importer = _importer(nsys)
    if importer is None:
        return Check("nsys", WARN, f"{nsys}: no QdstrmImporter beside it, so it can write only raw .qdstrm traces",
                     "install a full Nsight Systems")
    ldd = shutil.which("ldd")
    if ldd is None:
        return Check("nsys", OK, f"{nsys} (importer {importer}; its libraries not checked: no ldd)")
    try:
        out = subprocess.run([ldd, str(importer)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    missing = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
    if missing:
        return Check("nsys", WARN, f"{nsys}: its importer lacks {', '.join(missing)}, so nsys cannot write a "
                                   ".nsys-rep (only a .qdstrm)",
                     "install them (libdw.so.1: Debian's libdw1), or see devtools/nsys_on_gpu.sh")
    return Check("nsys", OK, f"{nsys} (its importer starts: reports can be written)")


def check_timing(f: Facts) -> Check:
    """Which source will time kernels without ncu in a calibration, and what would give a better one."""
    tracer = tracer_status(f.env)
    if tracer.path is not None or tracer.how == "buildable":
        what = (f"{tracer.how}: {tracer.path}" if tracer.path is not None else tracer.reason)
        return Check("timing", OK, f"calibration times each kernel with the CUPTI tracer ({what}) and stops "
                                   "once the stalled kernel has finished")
    better = (f"for per-kernel times that stop early, install g++ and the CUDA toolkit (cupti.h, libcupti.so; "
              f"CUDA_HOME), or set {TRACER_VAR}=/path/to/libnsightwrap_tracer.so")
    nsys = check_nsys(f)
    if nsys.status == OK:
        return Check("timing", WARN, f"calibration times each kernel with nsys, the whole program to its end (no "
                                     f"CUPTI tracer: {tracer.reason})", better)
    return Check("timing", WARN, "calibration bounds every kernel by a plain run's wall time, the slowest "
                                 f"allowances (no CUPTI tracer: {tracer.reason}; nsys cannot time kernels)",
                 better + "; else a working nsys (see the nsys line)")


def check_store(f: Facts) -> Check:
    """What a command that records does first (repair_sidecars, then store_problem), then the store's mode."""
    path = f.store
    if isinstance(path, StoreLocation):
        return _check_database(path)
    if os.path.lexists(path):  # a dangling link too: the check says what is wrong
        repaired = repair_sidecars(path)
        problem = store_problem(path, writing=True)
        if problem:
            return Check("store", FAIL, problem, "do as it says, or set NSIGHTWRAP_STORE / --store to another file")
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            return Check("store", WARN, f"{path} is readable by others (mode {mode:o}); it holds command lines "
                                        "and host names", f"chmod 600 {path}")
        fixed = f"; made {', '.join(s.name for s in repaired)} writable again" if repaired else ""
        return Check("store", OK, f"{path} (mode {mode:o}, writable{fixed})")
    parent = next((p for p in path.parents if p.exists()), Path("/"))
    problem = folder_problem(parent, create=False)
    if problem:
        return Check("store", FAIL, f"{path} cannot be created: {problem}",
                     "set NSIGHTWRAP_STORE (or --store) to a file in a folder you can write")
    return Check("store", OK, f"{path} (not created yet; will be made 0600)")


def _check_database(location: StoreLocation) -> Check:
    """A team's database: reachable (a run that cannot reach it records in the local file instead)?"""
    try:
        HangStore(location, readonly=True, busy_timeout=5).close()
    except StoreUnreachable as e:
        return Check("store", WARN, f"{e} Runs record in the local store {local_default()} meanwhile",
                     "start the database or fix the URL; then `nsightwrap hangs export`/`import` moves the records")
    except StoreError as e:  # e.g. a database with no tables yet: the first run that records makes them
        return Check("store", OK, f"{location} (a PostgreSQL database, reachable: {e})")
    return Check("store", OK, f"{location} (a PostgreSQL database, reachable)")


#: Everything doctor asks, in order.
DOCTOR_CHECKS: tuple[Callable[[Facts], Check], ...] = (
    check_ncu, check_driver, check_ncu_driver, CounterProbe(), check_gpu_processes, check_nsys, check_timing,
    check_store)
#: Before a walk or a sweep: what could make a long run useless, cheaply (the ncu probe is cached).
#: Not the counter probe: a walk's or a sweep's first run of ncu is that probe already, and stops the
#: walk at once on ERR_NVGPUCTRPERM with the same remedy; running ncu once more before it cost a fresh
#: machine's first walk 2-2.5 s (H200, 2026-11-26).
PREFLIGHT_CHECKS: tuple[Callable[[Facts], Check], ...] = (check_ncu_driver, check_gpu_processes, check_store)


def run_checks(facts: Facts, checks: Sequence[Callable[[Facts], Check]]) -> list[Check]:
    return [check(facts) for check in checks]


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]


def as_json(checks: Sequence[Check]) -> list[dict]:
    return [asdict(c) for c in checks]

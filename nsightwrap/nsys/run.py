"""Nsight Systems (nsys): find it, profile a command under the watchdog, read reports as DataFrames.

    run = profile_nsys(["python", "train.py"], NsysOptions(output="runs/train"),
                       RunConfig(timeout=600))
    run.raise_for_status()                 # NsysFailed carries the run
    tables = nsys_stats(run.report)        # {"cuda_gpu_kern_sum": DataFrame, ...}
    kernels = kernel_rows(nsys_export_sqlite(run.report))

`profile_nsys` runs `nsys profile` through the same watchdog as ncu
(`watchdog.watch`): a new session, a cookie in every process's environment,
and the whole tree stopped whatever happens. nsys prints no per-kernel
progress, so there is no stall rule; a total timeout (RunConfig.timeout) and
an optional silence rule stop it.

nsys exits 0 on several failures; they are read from its output instead:
- "Importer error status" / "skipping importation of the QDSTRM file": the
  trace was taken but QdstrmImporter could not start (on the GPU machine the
  nsys bundled with Nsight Compute lacks libdw.so.1): a `.qdstrm` is left
  instead of a `.nsys-rep` (see nsight-reference transcripts);
- "already exists" / "--force-overwrite": the output file existed;
- "could not be found" / "Report ... not found": an unknown stats report;
- "No such file": a missing program or file.

DataFrame schemas
-----------------
`nsys_stats` returns one DataFrame per report, with nsys's own CSV column
names (STATS_COLUMNS lists those of the default reports, as nsys
2024/2025 print them); columns whose values are all numbers are numeric,
names stay text. A report without data ("SKIPPED: ... does not contain CUDA
kernel data") is an empty DataFrame with the report's known columns and
`df.attrs["note"]` holding nsys's words. Every frame has
`attrs["report"]` (the report name) and `attrs["raw"]` (nsys's output).

`kernel_rows` returns one row per kernel launch (KERNEL_COLUMNS):
start, end, duration_ns (ns, GPU clock), gridX..Z, blockX..Z, stream
(CUDA stream id), device (device id), name (demangled), short_name,
correlationId (matches the CUDA API call that launched it). Columns a
version of the export lacks are missing values, listed in
`attrs["missing"]`.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # pragma: no cover - `python nsightwrap/nsys.py ...`
    # Run as a file (the GPU machine lacks tenacity / PyYAML / pandas, which the
    # package's __init__ imports): make a bare `nsightwrap` package to import from.
    import os as _os
    import sys as _sys
    import types as _types

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    _pkg = _types.ModuleType("nsightwrap")
    _pkg.__path__ = [_here]
    _sys.modules["nsightwrap"] = _pkg
    __package__ = "nsightwrap"

import csv
import json
import os
import re
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from nsightwrap.ncu.attempt import CRASHED, ERROR, EXIT_CODES, HANG, INTERRUPTED, OK
from nsightwrap.ncu.engine import RunConfig, wanted_report
from nsightwrap.errors import NsightwrapError, OptionsError, ToolError
from nsightwrap.watch.locate import search_tool
from nsightwrap.watch.rules import RunState, TotalTimeout, Verdict, WatchRule
from nsightwrap.watch.process import RunOutcome, StopRecord, find_orphans, watch

if TYPE_CHECKING:  # pragma: no cover
    from pandas import DataFrame

__all__ = [
    "CAPTURE_RANGES",
    "DEFAULT_STATS_REPORTS",
    "DEFAULT_TRACE",
    "ENV_NSYS",
    "KERNEL_COLUMNS",
    "NsysFailed",
    "NsysInterrupted",
    "NsysOptions",
    "NsysRun",
    "SilenceRule",
    "STATS_COLUMNS",
    "StatsTable",
    "build_nsys_argv",
    "classify_nsys",
    "find_nsys",
    "kernel_rows",
    "nsys_export_sqlite",
    "nsys_stats",
    "parse_stats_csv",
    "parse_stats_table",
    "profile_nsys",
    "split_stats_output",
]

ENV_NSYS = "NSIGHTWRAP_NSYS"
NSYS_SUFFIX = ".nsys-rep"
QDSTRM_SUFFIX = ".qdstrm"
SQLITE_SUFFIX = ".sqlite"

DEFAULT_CUDA_ROOT = "/usr/local/cuda"
DEFAULT_SYSTEMS_ROOT = "/opt/nvidia/nsight-systems"
DEFAULT_COMPUTE_ROOT = "/opt/nvidia/nsight-compute"

DEFAULT_TRACE = ("cuda", "nvtx", "osrt")
CAPTURE_RANGES = ("cudaProfilerApi", "nvtx")
DEFAULT_STATS_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum")
FRONTEND_NAMES = ("nsys",)

#: Seconds one `nsys stats` (one report) or `nsys export` may take.
STATS_TIMEOUT_S = 300.0
EXPORT_TIMEOUT_S = 600.0

_SUMMARY = ("Time (%)", "Total Time (ns)")
_SPREAD = ("Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)")
#: Columns of the default reports, as nsys 2024/2025 print them in CSV.
STATS_COLUMNS: dict[str, tuple[str, ...]] = {
    "cuda_gpu_kern_sum": _SUMMARY + ("Instances",) + _SPREAD + ("Name",),
    "cuda_api_sum": _SUMMARY + ("Num Calls",) + _SPREAD + ("Name",),
    "nvtx_sum": _SUMMARY + ("Instances",) + _SPREAD + ("Style", "Range"),
    "cuda_gpu_mem_time_sum": _SUMMARY + ("Count",) + _SPREAD + ("Operation",),
}
#: Columns that stay text even when every value looks like a number.
TEXT_COLUMNS = frozenset({"Name", "Range", "Style", "Operation", "Category", "API Name", "Kernel Name", "Domain"})

#: `kernel_rows` columns, in order (see the module docstring).
KERNEL_COLUMNS = ("start", "end", "duration_ns", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                  "stream", "device", "name", "short_name", "correlationId")

_HINT = (
    "Install NVIDIA Nsight Systems (https://developer.nvidia.com/nsight-systems; the CUDA toolkit's "
    "nsight-systems package, or the copy inside Nsight Compute at host/target-linux-x64/nsys), "
    f"or point nsightwrap at nsys: set {ENV_NSYS}=/path/to/nsys or pass nsys=/path/to/nsys."
)

_LIBDW_HINT = (
    "nsys traced the program but its importer (QdstrmImporter) could not start, so it left the raw "
    "trace {qdstrm} instead of a .nsys-rep. The usual cause is a missing libdw.so.1 (check with "
    "`ldd <nsys dir>/../linux-desktop-glibc_2_11_3-x64/QdstrmImporter | grep 'not found'`): install "
    "libdw1 (elfutils; `apt-get install libdw1`), or point {env} at a full Nsight Systems "
    "(/opt/nvidia/nsight-systems/<version>/bin/nsys). The .qdstrm can be imported later with "
    "`QdstrmImporter -i FILE.qdstrm`."
)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class NsysFailed(NsightwrapError):
    """An nsys run ended other than ok; carries the NsysRun."""

    def __init__(self, run: "NsysRun"):
        self.run = run
        super().__init__(run.describe())


class NsysInterrupted(KeyboardInterrupt):
    """Ctrl-C during `profile_nsys`, re-raised after the tree was stopped; carries the run."""

    def __init__(self, run: "NsysRun"):
        super().__init__(run.describe())
        self.run = run


# --------------------------------------------------------------------------
# Finding nsys
# --------------------------------------------------------------------------


def find_nsys(
    explicit: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    *,
    cuda_root: str = DEFAULT_CUDA_ROOT,
    systems_root: str = DEFAULT_SYSTEMS_ROOT,
    compute_root: str = DEFAULT_COMPUTE_ROOT,
) -> str:
    """Absolute path of nsys.

    Order: ``explicit``, ``$NSIGHTWRAP_NSYS``, ``PATH``, ``$CUDA_HOME/bin``,
    ``<cuda_root>/bin``, newest ``<systems_root>/<version>/bin/nsys``, and
    last the copy inside Nsight Compute, newest
    ``<compute_root>/<version>/host/target-linux-x64/nsys`` (it may lack its
    importer's libdw.so.1: see `profile_nsys`). The roots are parameters
    only so tests can point them at a temporary folder.
    """
    env = os.environ if env is None else env
    installs = [(os.path.join(systems_root, "*", "bin", "nsys"), lambda p: Path(p).parents[1].name),
                (os.path.join(compute_root, "*", "host", "target-linux-x64", "nsys"), lambda p: Path(p).parents[2].name)]
    return search_tool("nsys", explicit, "nsys=", ENV_NSYS, env, cuda_root, installs, _HINT)


def bundled_with_ncu(nsys: str) -> bool:
    """True for the nsys copy shipped inside Nsight Compute (its importer may not start)."""
    parts = Path(nsys).parts
    return "target-linux-x64" in parts and any("nsight-compute" in p for p in parts)


# --------------------------------------------------------------------------
# Options and the command line
# --------------------------------------------------------------------------

_OUTPUT_FLAGS = ("-o", "--output", "-f", "--force-overwrite")


@dataclass(frozen=True)
class NsysOptions:
    """What `nsys profile` collects; validated once, when built.

    trace: APIs to trace (``--trace``). capture_range: None (whole run),
    "cudaProfilerApi" (between cudaProfilerStart/Stop) or "nvtx" (inside the
    NVTX range ``nvtx_capture``, "RANGE" or "RANGE@DOMAIN"). output: report
    path (".nsys-rep" is added; an existing report is never overwritten, the
    run writes NAME-1.nsys-rep instead). sample: ``--sample`` (e.g. "none").
    extra_args: passed to `nsys profile` as they are.
    """

    trace: tuple[str, ...] = DEFAULT_TRACE
    capture_range: Optional[str] = None
    nvtx_capture: Optional[str] = None
    output: Optional[str] = None
    sample: Optional[str] = None
    extra_args: tuple[str, ...] = ()

    def __post_init__(self):
        trace = (self.trace,) if isinstance(self.trace, str) else tuple(self.trace)
        trace = tuple(t.strip() for item in trace for t in str(item).split(","))
        if not trace or any(not t or any(c.isspace() for c in t) for t in trace):
            raise OptionsError(f"trace={self.trace!r}: give API names such as ('cuda', 'nvtx', 'osrt'), or ('none',)")
        object.__setattr__(self, "trace", trace)
        cr = self.capture_range
        if cr is not None:
            canonical = {c.lower(): c for c in CAPTURE_RANGES}.get(str(cr).lower(), "none" if str(cr).lower() == "none" else None)
            if canonical is None:
                raise OptionsError(f"capture_range={cr!r}: use None, " + " or ".join(repr(c) for c in CAPTURE_RANGES))
            object.__setattr__(self, "capture_range", None if canonical == "none" else canonical)
        if self.capture_range == "nvtx" and not self.nvtx_capture:
            raise OptionsError("capture_range='nvtx' needs the range: nvtx_capture='RANGE' or 'RANGE@DOMAIN'")
        if self.nvtx_capture and self.capture_range != "nvtx":
            raise OptionsError("nvtx_capture is used only with capture_range='nvtx'; set both")
        if self.output is not None:
            object.__setattr__(self, "output", os.fspath(self.output))
        extra = (self.extra_args,) if isinstance(self.extra_args, str) else tuple(self.extra_args)
        extra = tuple(str(a) for a in extra)
        for a in extra:
            if a in _OUTPUT_FLAGS or any(a.startswith(f + "=") for f in _OUTPUT_FLAGS if f.startswith("--")):
                raise OptionsError(f"extra_args may not hold {a!r}: give the report path as output=, "
                                   "and nsightwrap never overwrites a report")
        object.__setattr__(self, "extra_args", extra)

    def replace(self, **changes) -> "NsysOptions":
        return replace(self, **changes)


def nsys_report_path(output: str | os.PathLike) -> str:
    """`output` with ".nsys-rep" added when it lacks it."""
    out = os.fspath(output)
    return out if out.endswith(NSYS_SUFFIX) else out + NSYS_SUFFIX


def build_nsys_argv(nsys: str, options: NsysOptions, command: Sequence[str]) -> list[str]:
    """The `nsys profile` command line; pure."""
    command = list(command)
    if not command:
        raise OptionsError("nothing to profile: give a command, e.g. ['python', 'train.py']")
    argv = [nsys, "profile", "--trace=" + ",".join(options.trace)]
    if options.sample is not None:
        argv.append(f"--sample={options.sample}")
    if options.capture_range:
        argv.append(f"--capture-range={options.capture_range}")
    if options.nvtx_capture:
        argv.append(f"--nvtx-capture={options.nvtx_capture}")
    argv.extend(options.extra_args)
    if options.output is not None:
        argv += ["-o", nsys_report_path(options.output)]
    return argv + command


def _stem(path: Path) -> Path:
    """The report path without .nsys-rep."""
    name = path.name
    return path.with_name(name[: -len(NSYS_SUFFIX)] if name.endswith(NSYS_SUFFIX) else name)


def _taken(report: Path) -> bool:
    stem = _stem(report)
    return any(stem.with_name(stem.name + s).exists() for s in (NSYS_SUFFIX, QDSTRM_SUFFIX, SQLITE_SUFFIX))


def unique_nsys_path(wanted: str | os.PathLike) -> Path:
    """`wanted`.nsys-rep, or NAME-N.nsys-rep when that (or its .qdstrm / .sqlite) exists."""
    path = Path(nsys_report_path(wanted))
    if not _taken(path):
        return path
    stem = _stem(path).name
    n = 1
    while _taken(path.with_name(f"{stem}-{n}{NSYS_SUFFIX}")):
        n += 1
    return path.with_name(f"{stem}-{n}{NSYS_SUFFIX}")


def plan_nsys_report(options: NsysOptions, command: Sequence[str], config: RunConfig) -> tuple[NsysOptions, Path, list[str]]:
    """Where this run's report goes (never an existing one), and options that say so."""
    notes = []
    wanted = wanted_report(options.output, command, config, NSYS_SUFFIX)
    path = unique_nsys_path(wanted)
    if options.output and path != Path(nsys_report_path(wanted)):
        notes.append(f"{nsys_report_path(wanted)} (or its .qdstrm/.sqlite) already exists and is kept; "
                     f"this run writes {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path = path.absolute()
    return options.replace(output=str(path)), path, notes


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SilenceRule(WatchRule):
    """No output at all for `seconds`: status "hang". Opt-in: nsys itself is quiet while it traces."""

    seconds: float

    def __post_init__(self):
        if not self.seconds > 0:
            raise ValueError("silence timeout must be > 0 seconds")

    def deadline(self, state: RunState) -> float:
        return state.last_output_at + self.seconds

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        silent = now - state.last_output_at
        if silent >= self.seconds:
            return Verdict(HANG, f"no output for {silent:.1f} s (silence timeout {self.seconds:g} s); "
                                 "raise silence_timeout if the program is merely quiet")
        return None


def nsys_rules(config: RunConfig, silence_timeout: Optional[float] = None) -> Optional[WatchRule]:
    """TotalTimeout when config.timeout is set, | SilenceRule when asked for; None: no limit."""
    rules: list[WatchRule] = []
    if config.timeout is not None:
        rules.append(TotalTimeout(config.timeout))
    if silence_timeout is not None:
        rules.append(SilenceRule(silence_timeout))
    if not rules:
        return None
    rule = rules[0]
    for r in rules[1:]:
        rule = rule | r
    return rule


# --------------------------------------------------------------------------
# The run record and what nsys's output means
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class NsysRun:
    """One watched `nsys profile`: what was asked, what happened, what was kept.

    report: the .nsys-rep, or the .qdstrm when the import failed, or None.
    """

    status: str
    reason: str
    command: tuple[str, ...]
    argv: tuple[str, ...]
    report: Optional[Path]
    returncode: Optional[int]
    elapsed_s: float
    log: str
    stop: Optional[StopRecord]
    cookie: str
    nsys: str
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def report_kind(self) -> Optional[str]:
        if self.report is None:
            return None
        return "qdstrm" if self.report.name.endswith(QDSTRM_SUFFIX) else "nsys-rep"

    def describe(self) -> str:
        where = f"; report: {self.report}" if self.report else "; no report"
        return f"nsys {self.status}: {self.reason}{where}"

    def raise_for_status(self) -> "NsysRun":
        if not self.ok:
            raise NsysFailed(self)
        return self

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["report"] = str(self.report) if self.report else None
        d["report_kind"] = self.report_kind
        return d


_IMPORTER_FAILED = ("Importer error status", "skipping importation of the QDSTRM file")
_EXISTS = ("already exists", "use --force-overwrite", "--force-overwrite true", "--force-overwrite=true")
_UNKNOWN_REPORT = (re.compile(r"could not be found", re.I), re.compile(r"\bReport\b.*\bnot found", re.I))
_NO_SUCH_FILE = "No such file"
_ERROR_LINE = re.compile(r"^\s*(?:ERROR|Error)\b[:\s]")
_APP_FAILED = re.compile(r"(?:application|process|target)\b[^\n]*?(?:returned|exited with)[^\n]*?(?:exit )?code[:\s]+(-?\d+)", re.I)


def _lines_with(log: str, needles) -> list[str]:
    out = []
    for line in log.splitlines():
        s = line.strip()
        if not s:
            continue
        for n in needles:
            if (n.search(s) if isinstance(n, re.Pattern) else n.lower() in s.lower()):
                out.append(s)
                break
    return out


def generated_files(log: str) -> list[Path]:
    """Paths listed under nsys's "Generated:" line (one indented path a line)."""
    paths, inside = [], False
    for line in log.splitlines():
        if line.strip() == "Generated:":
            inside = True
            continue
        if inside:
            if line[:1] in (" ", "\t") and line.strip():
                paths.append(Path(line.strip()))
                continue
            inside = False
    return paths


def find_report(log: str, expected: Optional[Path]) -> Optional[Path]:
    """The report nsys made: a listed .nsys-rep, the expected one, else a .qdstrm."""
    listed = [p for p in generated_files(log) if p.exists()]
    candidates = [p for p in listed if p.name.endswith(NSYS_SUFFIX)]
    if expected is not None:
        candidates.append(expected)
    candidates += [p for p in listed if p.name.endswith(QDSTRM_SUFFIX)]
    if expected is not None:
        stem = _stem(expected)
        candidates.append(stem.with_name(stem.name + QDSTRM_SUFFIX))
    return next((p for p in candidates if p.exists()), None)


def classify_nsys(log: str, returncode: Optional[int], report: Optional[Path], *,
                  verdict: Optional[Verdict] = None, interrupted: bool = False,
                  exception: Optional[BaseException] = None, nsys: str = "nsys") -> tuple[str, str, list[str]]:
    """(status, reason, warnings) of one `nsys profile`; pure but for nothing: reads no files."""
    kept = f"; the report written before the stop is kept: {report}" if report else ""
    if verdict is not None:
        return verdict.status, verdict.reason + kept, []
    if interrupted:
        return INTERRUPTED, "interrupted (Ctrl-C or a termination signal); the tree was stopped" + kept, []
    if exception is not None:
        return ERROR, f"nsightwrap failed while watching: {exception!r}", []
    is_qdstrm = report is not None and report.name.endswith(QDSTRM_SUFFIX)
    importer = _lines_with(log, _IMPORTER_FAILED)
    if importer or is_qdstrm:
        reason = _LIBDW_HINT.format(qdstrm=report if is_qdstrm else "(a .qdstrm)", env=ENV_NSYS)
        if bundled_with_ncu(nsys):
            reason += f" This nsys ({nsys}) is the copy bundled with Nsight Compute."
        return ERROR, reason, importer
    exists = _lines_with(log, _EXISTS)
    # nsys's refusal names --force-overwrite or leaves no report; a program's own "already exists" does neither.
    if exists and (report is None or any("force-overwrite" in s.lower() for s in exists)):
        # nsys 2025.3.1 (GPU machine) then profiles anyway, into a name of its own, and exits 0.
        elsewhere = [str(p) for p in generated_files(log) if report is None or p != report]
        moved = f"; nsys wrote the profile to {', '.join(elsewhere)} instead" if elsewhere else ""
        return ERROR, (f"nsys would not overwrite an existing file ({exists[0]}){moved}; nsightwrap picks a free "
                       "name, so another process wrote it meanwhile: run again, or give another output="), exists
    unknown = _lines_with(log, _UNKNOWN_REPORT)
    if unknown:
        return ERROR, (f"nsys did not know a report ({unknown[0]}); run `nsys stats --help-reports` for the "
                       "names this version offers"), unknown
    missing = _lines_with(log, [_NO_SUCH_FILE])
    errors = [s for s in log.splitlines() if _ERROR_LINE.match(s)]
    if returncode is not None and returncode < 0:
        return CRASHED, f"nsys was killed by signal {-returncode} from outside nsightwrap" + kept, errors
    if returncode:
        app = _APP_FAILED.findall(log)
        if app and report is not None:
            return CRASHED, f"the profiled program failed (exit code {app[-1]}); the report is kept", errors
        first = (errors or missing or [f"nsys exited with code {returncode}"])[0].strip()
        return ERROR, first + _what_to_do(first), errors + missing
    if report is None:
        first = (missing or errors or ["nsys exited 0 but wrote no report"])[0].strip()
        return ERROR, first + _what_to_do(first), missing + errors
    return OK, f"report written: {report}", missing + errors


def _what_to_do(line: str) -> str:
    if _NO_SUCH_FILE.lower() in line.lower():
        return " (check that the program and every path given exist; the command is run from RunConfig.cwd)"
    if "wrote no report" in line:
        return " (was anything traced? check the log, the capture range, and that the program ran)"
    return " (see the log)"


def build_nsys_run(outcome: RunOutcome, *, command: Sequence[str], expected: Optional[Path], nsys: str,
                   notes: Sequence[str] = ()) -> NsysRun:
    report = find_report(outcome.log, expected)
    status, reason, warnings = classify_nsys(
        outcome.log, outcome.returncode, report, verdict=outcome.verdict, interrupted=outcome.interrupted,
        exception=outcome.exception, nsys=nsys)
    notes = list(notes)
    if outcome.stop and outcome.stop.reason == "leftovers":
        notes.append("nsys ended but left processes behind; they were stopped: "
                     + ", ".join(outcome.stop.killed or outcome.stop.steps))
    if outcome.stop and outcome.stop.survivors:
        notes.append("processes survived SIGKILL: " + ", ".join(outcome.stop.survivors))
    return NsysRun(status=status, reason=reason, command=tuple(command), argv=tuple(outcome.argv), report=report,
                   returncode=outcome.returncode, elapsed_s=outcome.elapsed_s, log=outcome.log, stop=outcome.stop,
                   cookie=outcome.cookie, nsys=nsys, notes=tuple(notes), warnings=tuple(warnings))


def profile_nsys(
    command: Sequence[str],
    options: Optional[NsysOptions] = None,
    config: RunConfig = RunConfig(),
    on_output: Optional[Callable[[str], None]] = None,
    *,
    nsys: Optional[str] = None,
    silence_timeout: Optional[float] = None,
    rules: Optional[WatchRule] = None,
    clock: Callable[[], float] = time.monotonic,
) -> NsysRun:
    """Profile `command` under `nsys profile`, watched like ncu; return what happened.

    A timeout or a failure is a status, not an exception (`run.raise_for_status()`
    makes it one). Problems found before launching (nsys missing, bad
    options) raise NsightwrapError; Ctrl-C raises NsysInterrupted after the
    tree is stopped. config.timeout is the total limit; silence_timeout
    (seconds without any output) is off unless given.
    """
    options = options or NsysOptions()
    command = list(command)
    if not command:
        raise OptionsError("nothing to profile: give a command, e.g. ['python', 'train.py']")
    env = dict(os.environ if config.env is None else config.env)
    nsys = find_nsys(nsys, env)
    if options.capture_range == "nvtx":
        # nsys matches only registered NVTX strings unless told otherwise.
        env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    options, report, notes = plan_nsys_report(options, command, config)
    argv = build_nsys_argv(nsys, options, command)
    orphans = find_orphans()
    if orphans:
        notes.append("processes of an earlier nsightwrap run whose owner was killed are still alive: "
                     + ", ".join(str(p.pid) for p in orphans) + "; run `python -m nsightwrap cleanup` to stop them")
    outcome = watch(argv, rules if rules is not None else nsys_rules(config, silence_timeout), policy=config.stop,
                    env=env, cwd=config.cwd, clock=clock, on_output=on_output, frontend_names=FRONTEND_NAMES)
    run = build_nsys_run(outcome, command=command, expected=report, nsys=nsys, notes=notes)
    if outcome.interrupted:
        raise NsysInterrupted(run)
    if outcome.exception is not None:
        raise outcome.exception
    return run


# --------------------------------------------------------------------------
# nsys stats: CSV text -> tables (stdlib) -> DataFrames
# --------------------------------------------------------------------------

_PROCESSING = re.compile(r"^\s*Processing \[(?P<input>.*)\] with \[(?P<script>.*?)\]\.\.\.\s*$")
_BANNERS = ("Generating SQLite file", "Processing [", "NOTICE:", "WARNING:", "SKIPPED:", "** ", "Generating '",
            "Generated:", "It is assumed", "Consider using", "File is older", "Use --force-export", "usage:", "Try '")
_NUMBER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)?(?:\.\d*)?(?:[eE][+-]?\d+)?$")


@dataclass(frozen=True)
class StatsTable:
    """One `nsys stats` report, parsed with the standard library only."""

    report: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    note: Optional[str] = None
    raw: str = ""

    def to_dataframe(self) -> "DataFrame":
        import pandas as pd

        df = pd.DataFrame(list(self.rows), columns=list(self.columns))
        if not self.rows:
            df = df.astype({c: ("str" if c in TEXT_COLUMNS else "float64") for c in self.columns})
        df.attrs["report"] = self.report
        df.attrs["raw"] = self.raw
        if self.note:
            df.attrs["note"] = self.note
        return df

    def to_csv(self) -> str:
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(self.rows)
        return buf.getvalue()


def _report_of(script: str) -> str:
    base = re.split(r"[\\/]", script.strip())[-1]
    return base[:-3] if base.endswith(".py") else base


def split_stats_output(text: str) -> dict[str, str]:
    """{report name: its part of the text}, cut at nsys's "Processing [...] with [.../NAME.py]..." lines.

    Text before the first such line (export notices) goes with the first
    report; without such lines the answer is {}.
    """
    parts: dict[str, list[str]] = {}
    preamble: list[str] = []
    current: Optional[list[str]] = None
    for line in text.splitlines():
        m = _PROCESSING.match(line)
        if m:
            current = parts.setdefault(_report_of(m["script"]), [])
            if preamble and len(parts) == 1:
                current.extend(preamble)
            current.append(line)
        elif current is None:
            preamble.append(line)
        else:
            current.append(line)
    return {k: "\n".join(v) + "\n" for k, v in parts.items()}


def _is_banner(s: str) -> bool:
    return s.startswith(_BANNERS) or bool(_PROCESSING.match(s))


def _cells(line: str) -> list[str]:
    return next(csv.reader([line]), [])


def _looks_like_header(cells: Sequence[str], report: str) -> bool:
    cells = [c.strip() for c in cells]
    if len(cells) < 2 or any(not c or _NUMBER.match(c) for c in cells):
        return False
    known = STATS_COLUMNS.get(report)
    if known and tuple(cells) == known:
        return True
    return cells[0].startswith("Time") or any(c in TEXT_COLUMNS for c in cells)


def _convert(values: list[str]) -> list[Any]:
    """Numbers when every non-empty value is one (ints stay ints), else the text."""
    cleaned = [v.strip() for v in values]
    present = [v for v in cleaned if v]
    if not present or not all(_NUMBER.match(v) and any(ch.isdigit() for ch in v) for v in present):
        return values
    plain = [v.replace(",", "") for v in cleaned]
    if all(re.fullmatch(r"[+-]?\d+", v) for v in plain if v):
        return [int(v) if v else None for v in plain]
    return [float(v) if v else None for v in plain]


def parse_stats_table(text: str, report_name: str) -> StatsTable:
    """The CSV table of `report_name` in `nsys stats --format csv` output; pure.

    Versions print banners before the header ("Generating SQLite file ...",
    "Processing [...] with [...]...", notices, " ** Title (name):", blank
    lines); when the text holds several reports the part of `report_name` is
    used. The header is the first line that reads as CSV of column names
    (starts with "Time" or has a Name/Range/Operation-like column); rows
    end at a blank line. "SKIPPED: ..." gives an empty table with the note.
    Raises ValueError when there is neither a table nor a SKIPPED line.
    """
    sections = split_stats_output(text)
    if sections:
        if report_name in sections:
            text = sections[report_name]
        elif len(sections) > 1:
            raise ValueError(f"no output for report {report_name!r}; the text holds {', '.join(sections)}")
    lines = text.splitlines()
    note: Optional[str] = None
    header_at = None
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("SKIPPED:") and note is None:
            note = s
        if _is_banner(s):
            continue
        if _looks_like_header(_cells(s), report_name):
            header_at = i
            break
    if header_at is None:
        if note:
            return StatsTable(report_name, STATS_COLUMNS.get(report_name, ()), (), note, text)
        problems = [s.strip() for s in lines if _ERROR_LINE.match(s) or "could not be found" in s or "not found" in s.lower()]
        raise ValueError(f"no CSV table for report {report_name!r}"
                         + (f": {problems[0]}" if problems else "") + f". nsys printed:\n{text.strip()[:2000]}")
    header = [c.strip() for c in _cells(lines[header_at].strip())]
    rows: list[list[str]] = []
    for line in lines[header_at + 1:]:
        s = line.rstrip("\r\n")
        if not s.strip():
            if rows:
                break
            continue
        if _PROCESSING.match(s):
            break
        if _is_banner(s.strip()):
            continue
        cells = _cells(s)
        if len(cells) > len(header):  # an unquoted comma in the last (name) column
            cells = cells[: len(header) - 1] + [",".join(cells[len(header) - 1:])]
        rows.append(cells + [""] * (len(header) - len(cells)))
    columns = [_convert([r[j] for r in rows]) if header[j] not in TEXT_COLUMNS else [r[j] for r in rows]
               for j in range(len(header))]
    converted = tuple(tuple(col[i] for col in columns) for i in range(len(rows)))
    return StatsTable(report_name, tuple(header), converted, note, text)


def parse_stats_csv(text: str, report_name: str) -> "DataFrame":
    """`parse_stats_table` as a DataFrame (see the module docstring for the schema)."""
    return parse_stats_table(text, report_name).to_dataframe()


# --------------------------------------------------------------------------
# Running nsys stats / export
# --------------------------------------------------------------------------


def _run_tool(argv: list[str], timeout: float, env: Optional[Mapping[str, str]]) -> RunOutcome:
    """A short nsys command under the watchdog: total timeout, whole tree stopped."""
    outcome = watch(argv, TotalTimeout(timeout), env=env, frontend_names=FRONTEND_NAMES)
    if outcome.interrupted:
        raise KeyboardInterrupt(f"`{' '.join(argv)}` was interrupted; its tree was stopped")
    if outcome.exception is not None:
        raise outcome.exception
    if outcome.verdict is not None:
        raise ToolError(f"`{' '.join(argv)}` did not finish within {timeout:g} s and was stopped "
                        f"(raise timeout=). Output so far:\n{outcome.log[-4000:]}")
    return outcome


def _input_report(report: str | os.PathLike) -> Path:
    path = Path(report)
    if path.name.endswith(QDSTRM_SUFFIX):
        raise NsightwrapError(f"{path} is a raw .qdstrm trace (nsys could not import it): import it first with "
                              "`QdstrmImporter -i FILE.qdstrm` (needs libdw.so.1), then use the .nsys-rep")
    if not path.exists():
        raise NsightwrapError(f"no such report: {path}")
    return path


def stats_argv(nsys: str, report: str | os.PathLike, name: str) -> list[str]:
    """One `nsys stats` call for one report of a SQLite export, CSV to stdout; pure."""
    return [nsys, "stats", "--report", name, "--format", "csv", "--output", "-", os.fspath(report)]


def stats_tables(
    report: str | os.PathLike,
    reports: Sequence[str] = DEFAULT_STATS_REPORTS,
    nsys: Optional[str] = None,
    *,
    timeout: float = STATS_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, StatsTable]:
    """`nsys stats` of each report (one call each); stdlib only.

    A .nsys-rep is first exported to SQLite (``nsys export``, beside it) and
    the stats read from that file. Asking `nsys stats` to export (the first
    call with ``--force-export=true``) is not enough: on the GPU machine nsys
    2025.3.1 then called its own fresh export "older than input file" in the
    next call and printed only its usage (exit 1).
    """
    if isinstance(reports, str):
        reports = (reports,)
    path = _input_report(report)
    env = dict(os.environ if env is None else env)
    nsys = find_nsys(nsys, env)
    if path.name.endswith(NSYS_SUFFIX):
        path = nsys_export_sqlite(path, nsys, timeout=timeout, env=env)
    tables = {}
    for name in reports:
        argv = stats_argv(nsys, path, name)
        out = _run_tool(argv, timeout, env).log
        unknown = _lines_with(out, _UNKNOWN_REPORT)
        if unknown:
            raise ToolError(f"nsys does not know the report {name!r} ({unknown[0]}); run `{nsys} stats "
                            "--help-reports` for the names this version offers")
        if not split_stats_output(out) and _lines_with(out, [_NO_SUCH_FILE]):
            raise ToolError(f"`{' '.join(argv)}` failed: {_lines_with(out, [_NO_SUCH_FILE])[0]}")
        try:
            tables[name] = parse_stats_table(out, name)
        except ValueError as e:
            raise ToolError(f"could not read the output of `{' '.join(argv)}`: {e}") from e
    return tables


def nsys_stats(
    report: str | os.PathLike,
    reports: Sequence[str] = DEFAULT_STATS_REPORTS,
    nsys: Optional[str] = None,
    *,
    timeout: float = STATS_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, "DataFrame"]:
    """{report name: DataFrame} from `nsys stats --report NAME --format csv --output - REPORT`."""
    return {k: t.to_dataframe() for k, t in stats_tables(report, reports, nsys, timeout=timeout, env=env).items()}


def nsys_export_sqlite(
    report: str | os.PathLike,
    nsys: Optional[str] = None,
    *,
    output: Optional[str | os.PathLike] = None,
    timeout: float = EXPORT_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> Path:
    """`nsys export --type sqlite --force-overwrite=true -o OUT REPORT`; the SQLite file's path.

    OUT defaults to the report's path with .sqlite instead of .nsys-rep.
    """
    path = _input_report(report)
    env = dict(os.environ if env is None else env)
    nsys = find_nsys(nsys, env)
    out = Path(output) if output is not None else _stem(path).with_name(_stem(path).name + SQLITE_SUFFIX)
    argv = [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(out), str(path)]
    before = out.stat().st_mtime_ns if out.exists() else None
    outcome = _run_tool(argv, timeout, env)
    for candidate in (out, out.with_name(out.name + SQLITE_SUFFIX)):
        if candidate.exists() and (candidate != out or before is None or out.stat().st_mtime_ns != before):
            if outcome.returncode:
                raise ToolError(f"`{' '.join(argv)}` exited with code {outcome.returncode}:\n{outcome.log[-4000:]}")
            return candidate
    raise ToolError(f"`{' '.join(argv)}` wrote no SQLite file (exit code {outcome.returncode}). "
                    f"nsys printed:\n{outcome.log[-4000:]}")


# --------------------------------------------------------------------------
# Kernel rows from the SQLite export
# --------------------------------------------------------------------------

_KERNEL_SOURCES = {
    "start": ("start",),
    "end": ("end",),
    "gridX": ("gridX",), "gridY": ("gridY",), "gridZ": ("gridZ",),
    "blockX": ("blockX",), "blockY": ("blockY",), "blockZ": ("blockZ",),
    "stream": ("streamId", "stream"),
    "device": ("deviceId", "device"),
    "name": ("demangledName", "name", "shortName", "mangledName"),
    "short_name": ("shortName",),
    "correlationId": ("correlationId",),
}
_NAME_COLUMNS = ("name", "short_name")


def _table(con: sqlite3.Connection, wanted: str) -> Optional[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    return next((r[0] for r in rows if r[0].lower() == wanted.lower()), None)


def kernel_records(sqlite_path: str | os.PathLike) -> tuple[tuple[str, ...], list[tuple[Any, ...]], list[str], list[str]]:
    """(KERNEL_COLUMNS, rows sorted by start, missing columns, notes); stdlib only."""
    path = Path(sqlite_path)
    if not path.exists():
        raise NsightwrapError(f"no such SQLite file: {path} (make one with nsys_export_sqlite)")
    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise NsightwrapError(f"cannot open {path} as SQLite: {e}") from e
    try:
        try:
            table = _table(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        except sqlite3.DatabaseError as e:
            raise NsightwrapError(f"{path} is not a SQLite database ({e}); export it with nsys_export_sqlite") from e
        if table is None:
            return KERNEL_COLUMNS, [], [], ["no CUPTI_ACTIVITY_KIND_KERNEL table: the report holds no CUDA kernel "
                                            "data (was cuda traced, and did the program launch kernels?)"]
        have = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        lower = {c.lower(): c for c in have}
        source = {}
        for col, options in _KERNEL_SOURCES.items():
            source[col] = next((lower[o.lower()] for o in options if o.lower() in lower), None)
        missing = [c for c, s in source.items() if s is None]
        picked = sorted({s for s in source.values() if s})
        data = con.execute(
            "SELECT " + ", ".join(f'"{c}"' for c in picked) + f' FROM "{table}"'
            + (f' ORDER BY "{source["start"]}"' if source["start"] else "")).fetchall()
        strings: dict[int, str] = {}
        strings_table = _table(con, "StringIds")
        if strings_table and any(source[c] for c in _NAME_COLUMNS):
            ids = {r[picked.index(source[c])] for r in data for c in _NAME_COLUMNS if source[c]}
            ids = [i for i in ids if isinstance(i, int)]
            for k in range(0, len(ids), 900):
                chunk = ids[k:k + 900]
                strings.update(con.execute(
                    f'SELECT id, value FROM "{strings_table}" WHERE id IN ({",".join("?" * len(chunk))})', chunk))
    finally:
        con.close()
    index = {s: picked.index(s) for s in picked}
    rows = []
    for r in data:
        rec = {c: (r[index[s]] if s else None) for c, s in source.items()}
        for c in _NAME_COLUMNS:
            v = rec[c]
            if isinstance(v, int):
                rec[c] = strings.get(v, str(v))
        s, e = rec["start"], rec["end"]
        rec["duration_ns"] = e - s if isinstance(s, (int, float)) and isinstance(e, (int, float)) else None
        rows.append(tuple(rec[c] for c in KERNEL_COLUMNS))
    notes = []
    if missing:
        notes.append(f"this export has no column for: {', '.join(missing)}")
    return KERNEL_COLUMNS, rows, missing, notes


def kernel_rows(sqlite_path: str | os.PathLike) -> "DataFrame":
    """One row per kernel launch from an nsys SQLite export (KERNEL_COLUMNS; see the module docstring)."""
    import pandas as pd

    columns, rows, missing, notes = kernel_records(sqlite_path)
    df = pd.DataFrame(rows, columns=list(columns))
    for c in columns:
        if c in _NAME_COLUMNS:
            df[c] = df[c].astype("str") if df[c].notna().all() else df[c].astype("object")
        elif df[c].isna().any() or df.empty:
            df[c] = pd.array(df[c].tolist(), dtype="Int64")
    df.attrs["missing"] = list(missing)
    if notes:
        df.attrs["note"] = "; ".join(notes)
    df.attrs["source"] = str(sqlite_path)
    return df


# --------------------------------------------------------------------------
# CLI: python -m nsightwrap.nsys.run profile|stats|export|kernels|find
# --------------------------------------------------------------------------


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m nsightwrap.nsys.run", description="Nsight Systems under the nsightwrap watchdog")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("profile", help="nsys profile a command; prints the run as JSON")
    pr.add_argument("-o", "--output")
    pr.add_argument("--trace", default=",".join(DEFAULT_TRACE))
    pr.add_argument("--capture-range")
    pr.add_argument("--nvtx-capture")
    pr.add_argument("--sample")
    pr.add_argument("--timeout", type=float, help="total seconds")
    pr.add_argument("--silence-timeout", type=float)
    pr.add_argument("--nsys")
    pr.add_argument("--extra", action="append", default=[], help="one extra nsys argument (repeat)")
    pr.add_argument("command", nargs=argparse.REMAINDER)
    st = sub.add_parser("stats", help="nsys stats reports as tables")
    st.add_argument("report")
    st.add_argument("--report", dest="reports", action="append")
    st.add_argument("--nsys")
    st.add_argument("--timeout", type=float, default=STATS_TIMEOUT_S)
    st.add_argument("--save-dir", help="write NAME.txt (nsys's raw output) and NAME.csv here")
    ex = sub.add_parser("export", help="nsys export --type sqlite; prints the path")
    ex.add_argument("report")
    ex.add_argument("-o", "--output")
    ex.add_argument("--nsys")
    ex.add_argument("--timeout", type=float, default=EXPORT_TIMEOUT_S)
    kr = sub.add_parser("kernels", help="kernel rows of a SQLite export")
    kr.add_argument("sqlite")
    kr.add_argument("--csv", help="write all rows here")
    fd = sub.add_parser("find", help="print the nsys that would be used")
    fd.add_argument("--nsys")
    a = p.parse_args(argv)

    try:
        if a.cmd == "find":
            print(find_nsys(a.nsys))
            return 0
        if a.cmd == "profile":
            command = a.command[1:] if a.command[:1] == ["--"] else a.command
            opts = NsysOptions(trace=tuple(a.trace.split(",")), capture_range=a.capture_range,
                               nvtx_capture=a.nvtx_capture, output=a.output, sample=a.sample, extra_args=tuple(a.extra))
            run = profile_nsys(command, opts, RunConfig(timeout=a.timeout, check_gpu=False),
                               on_output=lambda t: (sys.stderr.write(t), sys.stderr.flush()),
                               nsys=a.nsys, silence_timeout=a.silence_timeout)
            d = run.to_json()
            d["log"] = d["log"][-20000:]
            print(json.dumps(d, indent=1, default=str))
            return EXIT_CODES.get(run.status, 1)
        if a.cmd == "stats":
            tables = stats_tables(a.report, tuple(a.reports or DEFAULT_STATS_REPORTS), a.nsys, timeout=a.timeout)
            pandas_ok = _have_pandas()
            for name, t in tables.items():
                if a.save_dir:
                    d = Path(a.save_dir)
                    d.mkdir(parents=True, exist_ok=True)
                    (d / f"{name}.txt").write_text(t.raw)
                    (d / f"{name}.csv").write_text(t.to_csv())
                print(f"== {name}: {len(t.rows)} rows" + (f" ({t.note})" if t.note else ""))
                if pandas_ok:
                    df = t.to_dataframe()
                    print(df.dtypes.to_string())
                    print(df.to_string(max_colwidth=80))
                else:
                    print(t.to_csv())
            return 0
        if a.cmd == "export":
            print(nsys_export_sqlite(a.report, a.nsys, output=a.output, timeout=a.timeout))
            return 0
        if a.cmd == "kernels":
            columns, rows, missing, notes = kernel_records(a.sqlite)
            print(f"{len(rows)} kernel rows; missing columns: {missing or 'none'}; {'; '.join(notes)}")
            if a.csv:
                with open(a.csv, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(columns)
                    w.writerows(rows)
            if _have_pandas():
                print(kernel_rows(a.sqlite).head(40).to_string(max_colwidth=80))
            else:
                for r in rows[:40]:
                    print(r)
            return 0
    except NsightwrapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())

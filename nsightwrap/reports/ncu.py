"""Nsight Compute reports (``.ncu-rep``) as pandas DataFrames.

    from nsightwrap.reports.ncu import load_report
    df = load_report("run.ncu-rep")                          # wide: one row per result
    df = load_report(attempt, metrics="gpu__time_duration.sum")  # an Attempt's report
    df = load_report(path, metrics=["dram__*", "regex:^sm__throughput"], tidy=True)
    df = load_report(path, sections="SpeedOfLight")
    df.attrs["units"]["gpu__time_duration.sum"]              # 'ns'

Wide form (the default)
-----------------------
One row per profile result: a kernel launch, or a whole range under range
replay. Identity columns come first, in the order of :data:`IDENTITY_COLUMNS`:

=====================  =======  ==================================================
column                 dtype    meaning
=====================  =======  ==================================================
result                 int      index of the result in the report, across ranges
range                  int      index of the report range holding it (None: CSV)
function               str      function name (``vec_add``)
demangled              str      demangled name (``vec_add(const float *, ...)``)
mangled                str      mangled name (``_Z7vec_addPKfS0_Pfi``; None: CSV)
grid_size              str      ``"(4096, 1, 1)"``, as ncu prints it
grid_x, grid_y, grid_z int      the grid dimensions
block_size             str      ``"(256, 1, 1)"``
block_x/_y/_z          int      the block dimensions
registers_per_thread   int      ``launch__registers_per_thread``
shared_mem_static      int      static shared memory, bytes per block
shared_mem_dynamic     int      dynamic shared memory, bytes per block
device                 int      CUDA device id (``launch__device_id``)
device_name            str      ``"NVIDIA H200"``
compute_capability     str      ``"9.0"``
context                int      CUDA context id
stream                 int      CUDA stream id
process                int      pid of the profiled process
process_name           str      its executable, as recorded by ncu
host                   str      host name, as recorded by ncu
nvtx                   str      NVTX ranges open at the launch, or None (see below)
=====================  =======  ==================================================

Then one column per metric, named as ncu names it, holding the metric's value:
float or int where the metric is numeric (``Int64`` when an integer metric is
missing in some results), ``str`` where it is a string, missing where a result
lacks the metric. An instanced metric gives its aggregate value, as ncu's raw
page does without ``--print-metric-instances``. Integer identity columns are
``Int64`` when some result lacks them (a range result, say).

Units: ``df.attrs["units"]`` maps every metric column (and the identity
columns that have one, see :data:`IDENTITY_UNITS`) to its unit as the report
stores it: ``"ns"``, ``"byte"``, ``"%"``, ``"cycle"``, ``""`` for none. Values
are never rescaled. ``df.attrs`` also holds ``"report"`` (the path),
``"reader"`` (``"extras"``, ``"wheel"`` or ``"csv"``, see below) and
``"reader_origin"`` (the module file, or the ncu binary for ``"csv"``).

Tidy form (``tidy=True``)
-------------------------
One row per (result, metric) that has a value: :data:`TIDY_IDENTITY_COLUMNS`
then ``metric``, ``value``, ``unit`` (:data:`TIDY_COLUMNS`). ``value`` is
float64 when every value is numeric, else object.

Choosing metrics
----------------
``metrics`` is a name or a list of them; each is an exact metric name, a glob
(``dram__*``, ``*.pct_of_peak_sustained_elapsed``) or ``regex:EXPR`` (matched
anywhere in the name, like ncu's own ``regex:``; anchor with ``^...$``).
Only the chosen metrics are read from the report. An exact name that no
result has raises :class:`ReportError` listing close matches; a glob or regex
that matches nothing just adds no column.

``sections`` is a section identifier or a list of them (``"SpeedOfLight"``,
as ``ncu --list-sections`` prints them; case-insensitive): the metrics each
section shows, from the report itself through ``ISection.header_metrics()``
and ``ISection.body_metrics()``, those of them the report holds. A body's
``breakdown:NAME`` item (the throughput breakdown tables of SpeedOfLight)
stands for the metrics it lists, which are included in its place.
``metrics`` and ``sections`` together give the union. Neither: every metric.

How a report is read
--------------------
With NVIDIA's ``ncu_report`` Python module. The one shipped with the ncu
install (``<install>/extras/python/ncu_report.py``; the install is found from
``ncu=``, a path to ncu or to the install folder, else from
:func:`nsightwrap.ncu.locate.find_ncu`, following symlinks and wrapper scripts such
as ``/usr/local/cuda/bin/ncu``) is preferred, because it matches the ncu that
wrote the report. It is imported under a private module name and removed from
``sys.modules`` afterwards, so it never shadows an ``import ncu_report``.
Otherwise the ``ncu_report`` wheel from PyPI. One caveat: every build of
``ncu_report`` registers the same SWIG type names, and a second build loaded
into the same process takes over the Python classes of the first (checked),
which is unsafe across versions. So when another build is already loaded in
this process, that build is used again instead of loading a second one (a
``RuntimeWarning`` says so once); and when the install's own build is
already loaded (imported from ``sys.path``, say), that module is used as is.

A second caveat, measured on the GPU machine: the extras module of ncu
2025.3.1 crashes the process (SIGSEGV in ``IMetric.unit()``) when it is
loaded after numpy, which PyTorch and pandas import; loaded before numpy it
works. So once numpy is imported, an extras build not yet loaded is passed
over for the wheel (or the CSV path below), and ``df.attrs["reader_note"]``
says so.

When no ``ncu_report`` imports at all, ``ncu --import FILE --csv --page raw
--print-units base`` is run and its output parsed by :func:`parse_raw_csv`
(no ``sections``, no ``range``/``mangled`` there; units as ncu
prints them).

Facts the Python API does not offer are read from the report file itself:
the process (pid, name, host) of each result is in the header of the file
block that holds it. The same walk over the file's blocks catches a file
that is not a report, or was cut short, before ``ncu_report`` sees it
(``ncu_report`` does not fail on those: it quietly returns no results or a
nameless one).

NVTX: ``IAction.nvtx_state()`` holds the NVTX state only when the program was
profiled with ``ncu --nvtx``. The ``nvtx`` column then lists, per domain, the
push/pop stack from outermost (``domain@outer/inner``) and each open
start/end range (``domain@range``), joined by ``"; "``; the default domain
(``<default domain>`` to ncu 2025.3.1) has no ``domain@`` prefix: ``outer/step0``. None when there is no state or nothing is open.

Partial reports (ncu stopped during a hang) load like any other: they hold
the results that were complete.
"""

from __future__ import annotations

import difflib
import functools
import fnmatch
import glob
import hashlib
import importlib
import importlib.util
import io
import os
import re
import struct
import sys
import threading
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from nsightwrap.errors import ReportError, ToolError, ToolNotFound
from nsightwrap.ncu.locate import find_ncu
from nsightwrap.watch.locate import run_command

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = [
    "IDENTITY_COLUMNS",
    "IDENTITY_UNITS",
    "ReportError",
    "TIDY_COLUMNS",
    "TIDY_IDENTITY_COLUMNS",
    "find_report_module",
    "load_report",
    "parse_raw_csv",
    "raw_csv_argv",
]


# --------------------------------------------------------------------------
# Schema: the column names, in one place
# --------------------------------------------------------------------------

RESULT = "result"
RANGE = "range"
FUNCTION = "function"
DEMANGLED = "demangled"
MANGLED = "mangled"
GRID_SIZE = "grid_size"
GRID_X, GRID_Y, GRID_Z = "grid_x", "grid_y", "grid_z"
BLOCK_SIZE = "block_size"
BLOCK_X, BLOCK_Y, BLOCK_Z = "block_x", "block_y", "block_z"
REGISTERS_PER_THREAD = "registers_per_thread"
SHARED_MEM_STATIC = "shared_mem_static"
SHARED_MEM_DYNAMIC = "shared_mem_dynamic"
DEVICE = "device"
DEVICE_NAME = "device_name"
COMPUTE_CAPABILITY = "compute_capability"
CONTEXT = "context"
STREAM = "stream"
PROCESS = "process"
PROCESS_NAME = "process_name"
HOST = "host"
NVTX = "nvtx"

#: Identity columns of the wide form, in order; metric columns follow.
IDENTITY_COLUMNS: tuple[str, ...] = (
    RESULT, RANGE, FUNCTION, DEMANGLED, MANGLED,
    GRID_SIZE, GRID_X, GRID_Y, GRID_Z,
    BLOCK_SIZE, BLOCK_X, BLOCK_Y, BLOCK_Z,
    REGISTERS_PER_THREAD, SHARED_MEM_STATIC, SHARED_MEM_DYNAMIC,
    DEVICE, DEVICE_NAME, COMPUTE_CAPABILITY, CONTEXT, STREAM,
    PROCESS, PROCESS_NAME, HOST, NVTX,
)

#: Units of the identity columns that have one (also put in ``attrs["units"]``).
IDENTITY_UNITS: Mapping[str, str] = {
    REGISTERS_PER_THREAD: "register/thread",
    SHARED_MEM_STATIC: "byte/block",
    SHARED_MEM_DYNAMIC: "byte/block",
}

METRIC, VALUE, UNIT = "metric", "value", "unit"
#: Identity columns kept by the tidy form.
TIDY_IDENTITY_COLUMNS: tuple[str, ...] = (RESULT, RANGE, FUNCTION, DEMANGLED)
#: All columns of the tidy form.
TIDY_COLUMNS: tuple[str, ...] = TIDY_IDENTITY_COLUMNS + (METRIC, VALUE, UNIT)

_INT_IDENTITY = frozenset({
    RESULT, RANGE, GRID_X, GRID_Y, GRID_Z, BLOCK_X, BLOCK_Y, BLOCK_Z,
    REGISTERS_PER_THREAD, SHARED_MEM_STATIC, SHARED_MEM_DYNAMIC, DEVICE, CONTEXT, STREAM, PROCESS,
})

# Identity columns taken from metrics of each result (API path).
_IDENTITY_METRICS: Mapping[str, str] = {
    GRID_X: "launch__grid_dim_x",
    GRID_Y: "launch__grid_dim_y",
    GRID_Z: "launch__grid_dim_z",
    BLOCK_X: "launch__block_dim_x",
    BLOCK_Y: "launch__block_dim_y",
    BLOCK_Z: "launch__block_dim_z",
    REGISTERS_PER_THREAD: "launch__registers_per_thread",
    SHARED_MEM_STATIC: "launch__shared_mem_per_block_static",
    SHARED_MEM_DYNAMIC: "launch__shared_mem_per_block_dynamic",
    DEVICE: "launch__device_id",
    DEVICE_NAME: "device__attribute_display_name",
    CONTEXT: "launch__context_id",
    STREAM: "launch__stream_id",
}
_CC_MAJOR = "device__attribute_compute_capability_major"
_CC_MINOR = "device__attribute_compute_capability_minor"

_BREAKDOWN = "breakdown:"


# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def load_report(path, metrics=None, sections=None, tidy=False, *, ncu=None) -> "pandas.DataFrame":
    """Read an Nsight Compute report into a DataFrame (see the module docstring).

    ``path``: the ``.ncu-rep`` file, or an :class:`~nsightwrap.ncu.attempt.Attempt`
    (its ``report`` is read). ``metrics``: name(s), globs or ``regex:EXPR``.
    ``sections``: section identifier(s). ``tidy``: one row per (result,
    metric) instead of one per result. ``ncu``: the ncu (binary or install
    folder) whose ``ncu_report`` module should read the report.

    Raises :class:`ReportError` for a missing, foreign or truncated file, an
    exact metric name or a section the report lacks, and when nothing can
    read reports here.
    """
    report = _report_path(path)
    specs = _metric_specs(metrics)
    wanted_sections = _section_ids(sections)
    scan = _check_report_file(report)

    reader = _choose_reader(ncu)
    if reader.kind == "csv":
        if wanted_sections is not None:
            raise ReportError(
                report,
                "sections= needs the ncu_report Python module, and none could be imported here",
                "Install it (pip install ncu-report), or pass ncu= an Nsight Compute install that has "
                "extras/python/ncu_report.py; or choose metrics= instead.",
            )
        table = _read_csv(report, reader.origin)
    else:
        table = _read_api(report, reader.module, specs, wanted_sections, scan)

    if reader.kind == "csv" and specs is not None:
        table = table.select(_resolve(specs, table.names), report)
    frame = _build_tidy(table) if tidy else _build_wide(table)
    frame.attrs["report"] = str(report)
    frame.attrs["reader"] = reader.kind
    frame.attrs["reader_origin"] = reader.origin
    if reader.note:
        frame.attrs["reader_note"] = reader.note
    return frame


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------

_MISSING = object()


def _report_path(path: Any) -> Path:
    """A path from a str/PathLike, or from an Attempt-like object's ``report``."""
    if not isinstance(path, (str, os.PathLike)):
        report = getattr(path, "report", _MISSING)
        if report is _MISSING:
            raise TypeError(f"load_report() needs a path or an Attempt, not {type(path).__name__}")
        if report is None:
            status = getattr(path, "status", "?")
            reason = getattr(path, "reason", "")
            raise ReportError(
                None,
                f"the attempt kept no report ({status}: {reason})",
                "Profile with an export path (ProfileOptions(export=...)) and check attempt.status.",
            )
        path = report
    return Path(os.fspath(path)).expanduser()


@dataclass(frozen=True)
class _Spec:
    """One item of ``metrics=``: an exact name, a glob or a regex."""

    kind: str  # "name", "glob", "regex"
    text: str
    pattern: "re.Pattern[str] | None" = None

    def matches(self, name: str) -> bool:
        if self.kind == "glob":
            return fnmatch.fnmatchcase(name, self.text)
        assert self.pattern is not None
        return self.pattern.search(name) is not None


_GLOB_CHARS = frozenset("*?[")


def _metric_specs(metrics: Any) -> list[_Spec] | None:
    if metrics is None:
        return None
    items = [metrics] if isinstance(metrics, str) else list(metrics)
    specs = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"metrics must be names (str), not {type(item).__name__}: {item!r}")
        text = item.strip()
        if not text:
            raise ReportError(None, "metrics= holds an empty name", "Remove it, or give a metric name.")
        if text.startswith("regex:"):
            expr = text[len("regex:"):]
            try:
                specs.append(_Spec("regex", text, re.compile(expr)))
            except re.error as exc:
                raise ReportError(None, f"metrics= {text!r} is not a valid regular expression ({exc})",
                                  "Fix the expression (Python re syntax).") from exc
        elif _GLOB_CHARS & set(text):
            specs.append(_Spec("glob", text))
        else:
            specs.append(_Spec("name", text))
    return specs


def _section_ids(sections: Any) -> list[str] | None:
    if sections is None:
        return None
    items = [sections] if isinstance(sections, str) else list(sections)
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise TypeError(f"sections must be section identifiers (non-empty str), not {item!r}")
        out.append(item.strip())
    return out


def _resolve(specs: Sequence[_Spec], names: Callable[[], Iterable[str]]) -> list[str]:
    """The metric names that ``specs`` choose, in order, without duplicates.
    Exact names are kept as given (checked by the caller); ``names()`` (all
    metric names of the report) is called only when a glob or regex needs it."""
    pool: list[str] | None = None
    out: dict[str, None] = {}
    for spec in specs:
        if spec.kind == "name":
            out.setdefault(spec.text, None)
            continue
        if pool is None:
            pool = list(names())
        for name in sorted(n for n in pool if spec.matches(n)):
            out.setdefault(name, None)
    return list(out)


def _unknown_metrics_error(report: Path, missing: Sequence[str], universe: Sequence[str]) -> ReportError:
    lines = []
    for name in missing:
        close = difflib.get_close_matches(name, universe, n=5, cutoff=0.6)
        lines.append(f"  {name}" + (f"  (close: {', '.join(close)})" if close else ""))
    return ReportError(
        report,
        f"{len(missing)} metric(s) not in this report:\n" + "\n".join(lines),
        f"The report holds {len(universe)} metrics: list them with load_report(path).columns, or use a glob "
        "(dram__*) or regex:EXPR, which may match nothing without an error.",
    )


# --------------------------------------------------------------------------
# The report file itself: signature, blocks, processes
# --------------------------------------------------------------------------

_MAGIC = b"NVR\x00"
#: File format versions whose block layout was checked against real reports
#: (ncu 2025.3.1 writes 7). For newer ones a failed walk is only trusted
#: when ncu_report's answer looks broken too.
_KNOWN_FORMAT_VERSIONS = range(1, 8)
_TRUNCATED_HINT = (
    "The file was cut short (an interrupted copy, a full disk, or ncu still writing it). Copy it again, "
    "or profile again. A partial report from a stopped run is not truncated: ncu finishes the file."
)


@dataclass(frozen=True)
class _Process:
    pid: int | None
    host: str | None
    name: str | None


@dataclass(frozen=True)
class _FileScan:
    """What the walk over a report's blocks learnt."""

    version: int | None
    processes: tuple[_Process, ...] | None  # one per result in file order; None if unknown
    problem: str | None = None  # set when the walk failed and the format is not a known one


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _pb_fields(buf: bytes) -> dict[int, Any]:
    """Top-level fields of a protobuf message (first occurrence of each):
    ints for varints and fixed, bytes for length-delimited. ValueError when
    ``buf`` is not a well-formed message."""
    fields: dict[int, Any] = {}
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ValueError("field runs past the end")
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            if i + 8 > n:
                raise ValueError("field runs past the end")
            value, i = struct.unpack_from("<Q", buf, i)[0], i + 8
        elif wire == 5:
            if i + 4 > n:
                raise ValueError("field runs past the end")
            value, i = struct.unpack_from("<I", buf, i)[0], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(number, value)
    return fields


def _text(value: Any) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else None


def _process_of(header: Mapping[int, Any]) -> _Process:
    raw = header.get(6)
    if not isinstance(raw, bytes):
        return _Process(None, None, None)
    try:
        info = _pb_fields(raw)
    except ValueError:
        return _Process(None, None, None)
    pid = info.get(1)
    return _Process(pid if isinstance(pid, int) else None, _text(info.get(2)), _text(info.get(3)))


def _check_report_file(report: Path) -> _FileScan:
    """Fail early, naming the cause, for a file that is missing, not a report,
    or truncated; else learn the process of each result.

    A report is ``NVR\\0``, a u32 size and a FileHeader message, then blocks:
    a u32 size, a BlockHeader message (1 NumSources, 2 NumResults, 5
    PayloadSize, 6 Process {1 pid, 2 host, 3 name}, 7 range results), and
    PayloadSize bytes of payload. A complete file ends exactly at a block end.
    """
    try:
        size = report.stat().st_size
    except FileNotFoundError:
        raise ReportError(report, "no such file",
                          "Check the path; ncu writes NAME.ncu-rep where -o/--export NAME says.") from None
    except OSError as exc:
        raise ReportError(report, f"cannot be read ({exc.strerror or exc})",
                          "Check the path and its permissions.") from exc
    if not report.is_file():
        raise ReportError(report, "is not a file", "Give the path of the .ncu-rep file itself.")
    if size == 0:
        raise ReportError(report, "is empty (0 bytes)",
                          "ncu was stopped before it wrote anything, or the copy failed; profile again.")
    try:
        with open(report, "rb") as fh:
            return _walk_blocks(report, fh, size)
    except OSError as exc:
        raise ReportError(report, f"cannot be read ({exc.strerror or exc})", "Check the file's permissions.") from exc


def _walk_blocks(report: Path, fh: io.BufferedReader, size: int) -> _FileScan:
    head = fh.read(8)
    if head[:4] != _MAGIC:
        if report.suffix == ".ncu-repz":
            return _FileScan(None, None)  # compressed: left to ncu_report
        raise ReportError(
            report,
            f"is not an Nsight Compute report: it does not start with the report signature (it starts with {head!r})",
            "Pass the .ncu-rep file that ncu wrote with -o/--export; `ncu --import FILE` tells whether ncu "
            "can open it.",
        )
    if len(head) < 8:
        raise ReportError(report, f"is truncated: it ends inside the file header ({size:,} bytes)", _TRUNCATED_HINT)
    (header_size,) = struct.unpack_from("<I", head, 4)
    header = fh.read(header_size)
    if len(header) < header_size:
        raise ReportError(report, f"is truncated: it ends inside the file header ({size:,} bytes)", _TRUNCATED_HINT)
    try:
        version = _pb_fields(header).get(1)
    except ValueError:
        version = None
    known = isinstance(version, int) and version in _KNOWN_FORMAT_VERSIONS

    processes: list[_Process] = []
    offset, block = 8 + header_size, 0
    problem = None
    while offset < size and problem is None:
        if size - offset < 4:
            problem = f"is truncated: it ends {size - offset} byte(s) into the size of block {block} at byte {offset:,}"
            break
        fh.seek(offset)
        (block_header_size,) = struct.unpack("<I", fh.read(4))
        if offset + 4 + block_header_size > size:
            problem = (f"is truncated: block {block} at byte {offset:,} has a {block_header_size:,}-byte header, "
                       f"but the file ends at byte {size:,}")
            break
        try:
            fields = _pb_fields(fh.read(block_header_size))
        except ValueError as exc:
            problem = f"is damaged: the header of block {block} at byte {offset:,} cannot be read ({exc})"
            break
        payload = fields.get(5, 0)
        end = offset + 4 + block_header_size + (payload if isinstance(payload, int) else 0)
        if end > size:
            problem = (f"is truncated: block {block} at byte {offset:,} needs {end - offset:,} bytes, "
                       f"but the file ends at byte {size:,}")
            break
        results = sum(v for v in (fields.get(2, 0), fields.get(7, 0)) if isinstance(v, int))
        if results:
            processes.extend([_process_of(fields)] * results)
        offset, block = end, block + 1

    if problem is None:
        return _FileScan(version, tuple(processes))
    if known:
        raise ReportError(report, f"{problem} (the file is {size:,} bytes)",
                          _TRUNCATED_HINT if "truncated" in problem else
                          "Copy the file again, or profile again; `ncu --import FILE` may say more.")
    return _FileScan(version, None, problem)


# --------------------------------------------------------------------------
# Which ncu_report
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reader:
    kind: str  # "extras", "wheel" or "csv"
    origin: str  # the module's file, or the ncu binary for "csv"
    module: Any = None
    note: str = ""  # why a preferred reader was passed over


_LOCK = threading.Lock()
_PRIVATE: dict[str, types.ModuleType] = {}  # realpath of an extras ncu_report.py -> module
_WARNED: set[tuple[str, str]] = set()
_SCRIPT_PATH_RE = re.compile(r"""(/[^\s"'`;|&<>()$]+)""")


def find_report_module(ncu: str | os.PathLike) -> Path | None:
    """``<install>/extras/python/ncu_report.py`` of the Nsight Compute install
    that ``ncu`` belongs to, or None.

    ``ncu`` is the ncu binary, a symlink or wrapper script leading to it
    (absolute paths in a small ``#!`` script are followed), or the install
    folder. From each of those, the folder and up to three above it are
    searched (the real front end is ``<install>/target/<platform>/ncu``), and
    a CUDA toolkit's ``<cuda>/nsight-compute-*`` next to ``<cuda>/bin``. A
    wrapper script that computes its target is traced once (``sh -x``).
    """
    ncu = Path(os.fspath(ncu)).expanduser()
    for start in _install_candidates(ncu):
        found = _extras_at_or_above(start)
        if found is not None:
            return found
    if not ncu.is_dir():
        # A wrapper that computes its target at run time (CUDA 13's bin/ncu picks the newest
        # Nsight Compute it can see): follow the path it really runs.
        real = Path(os.path.realpath(ncu))
        st = real.stat() if real.exists() else None
        for target in _traced_targets(str(real), st.st_mtime_ns if st else 0):
            found = _extras_at_or_above(target if target.is_dir() else target.parent)
            if found is not None:
                return found
    return None


def _extras_at_or_above(start: Path) -> Path | None:
    for folder in (start, *list(start.parents)[:3]):
        candidate = folder / "extras" / "python" / "ncu_report.py"
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=16)
def _traced_targets(script: str, mtime_ns: int) -> tuple[Path, ...]:
    """The ncu paths a ``#!/bin/sh`` wrapper runs, read from ``sh -x SCRIPT --version``.

    The GPU machine's /usr/local/cuda/bin/ncu (CUDA 13.0) names no install in
    its text; tracing one ``--version`` run shows the ``exec`` it does. Cached
    per file and mtime.
    """
    try:
        with open(script, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return ()
    if not first.startswith(b"#!") or not re.search(rb"\b(sh|bash|dash)\b", first):
        return ()
    shell = "bash" if b"bash" in first else "sh"
    try:
        _, trace = run_command([shell, "-x", script, "--version"], timeout=30)
    except ToolError:
        return ()
    out: list[Path] = []
    for line in trace.splitlines():
        if not line.startswith("+"):
            continue
        for match in _SCRIPT_PATH_RE.finditer(line):
            candidate = Path(match.group(1))
            if candidate.name == "ncu" and os.path.realpath(candidate) != script and candidate.exists():
                out.append(Path(os.path.realpath(candidate)))
    return tuple(dict.fromkeys(out))


def _install_candidates(ncu: Path) -> Iterator[Path]:
    if ncu.is_dir():
        yield ncu
        return
    real = Path(os.path.realpath(ncu))
    yield real.parent
    if ncu.parent != real.parent:
        yield ncu.parent
    for target in _script_targets(real):
        yield target if target.is_dir() else target.parent
    for bin_dir in dict.fromkeys((real.parent, ncu.parent)):
        if bin_dir.name == "bin":
            kits = glob.glob(str(bin_dir.parent / "nsight-compute*"))
            for kit in sorted(kits, key=_version_key, reverse=True):
                yield Path(kit)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", os.path.basename(path)))


def _script_targets(path: Path) -> list[Path]:
    """Absolute paths named by a small ``#!`` script (a wrapper like cuda/bin/ncu)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return []
    if not head.startswith(b"#!") or b"\x00" in head:
        return []
    out = []
    for match in _SCRIPT_PATH_RE.finditer(head.decode("utf-8", "replace")):
        candidate = Path(match.group(1))
        if "ncu" in candidate.name or "nsight-compute" in str(candidate).lower():
            if candidate.exists():
                out.append(Path(os.path.realpath(candidate)))
    return out


def _extension_of(folder: Path) -> str | None:
    for pattern in ("_ncu_report*.so", "_ncu_report*.pyd", "_ncu_report*.dylib"):
        found = sorted(folder.glob(pattern))
        if found:
            return os.path.realpath(found[0])
    return None


def _loaded_builds() -> dict[str, types.ModuleType]:
    """Realpath of each ``_ncu_report`` extension loaded in this process -> the
    ncu_report module that uses it."""
    builds: dict[str, types.ModuleType] = {}
    for name, module in list(sys.modules.items()):
        if name.rpartition(".")[2] != "_ncu_report" or module is None:
            continue
        file = getattr(module, "__file__", None)
        parent = sys.modules.get(name.rpartition(".")[0] if "." in name else "ncu_report")
        if file and parent is not None and hasattr(parent, "load_report"):
            builds.setdefault(os.path.realpath(file), parent)
    for module in _PRIVATE.values():
        file = getattr(getattr(module, "_ncu_report", None), "__file__", None)
        if file:
            builds.setdefault(os.path.realpath(file), module)
    return builds


# Measured on the GPU machine (ncu 2025.3.1, Python 3.12): its extras _ncu_report.so dies with SIGSEGV in
# IMetric.unit() when numpy was imported before it (plainly too, without nsightwrap); imported first, it
# works. devtools/extras_order.py shows it.
_NUMPY_FIRST = ("numpy is already imported in this process, and the extras module of ncu 2025.3.1 crashes "
                "(SIGSEGV) when loaded after numpy: reading with the ncu-report wheel or ncu's CSV export instead "
                "(read one report before importing numpy to use the extras module)")


def _numpy_loaded() -> bool:
    return "numpy" in sys.modules


def _import_private(py_file: Path) -> types.ModuleType:
    """Import an extras ``ncu_report.py`` under a private package name (so its
    ``from . import _ncu_report`` finds the extension next to it), then drop
    those names from ``sys.modules``. Cached per file."""
    key = os.path.realpath(py_file)
    cached = _PRIVATE.get(key)
    if cached is not None:
        return cached
    package = "_nsightwrap_ncu_report_" + hashlib.sha1(key.encode()).hexdigest()[:12]
    name = package + ".ncu_report"
    spec = importlib.util.spec_from_file_location(name, key)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {key}")
    parent = types.ModuleType(package)
    parent.__path__ = [os.path.dirname(key)]
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = parent
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for loaded in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[loaded]
    _PRIVATE[key] = module
    return module


def _import_wheel() -> types.ModuleType:
    """The ``ncu_report`` module on sys.path (the PyPI wheel); ImportError if none."""
    return importlib.import_module("ncu_report")


def _module_file(module: types.ModuleType) -> str:
    return str(getattr(module, "__file__", None) or module.__name__)


def _kind_of(module: types.ModuleType) -> str:
    return "extras" if module in _PRIVATE.values() else "wheel"


def _reuse_warning(wanted: str, used: types.ModuleType) -> None:
    key = (wanted, _module_file(used))
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(
        f"nsightwrap reads reports with {_module_file(used)}, already loaded in this process, instead of "
        f"{wanted}: two builds of ncu_report in one process share SWIG's type table and can crash. "
        "Use a fresh process to read with the other one.",
        RuntimeWarning,
        stacklevel=4,
    )


def _choose_reader(ncu: str | os.PathLike | None) -> _Reader:
    """extras of the install that ``ncu`` (or find_ncu()) names, else the wheel,
    else ``ncu --import --csv``; never a second _ncu_report build in one process."""
    ncu_path: str | None
    if ncu is not None:
        ncu_path = os.path.expanduser(os.fspath(ncu))
        if not os.path.exists(ncu_path):
            raise ReportError(None, f"ncu={ncu_path!r} does not exist",
                              "Pass the ncu binary or the Nsight Compute install folder, or leave ncu= out.")
    else:
        try:
            ncu_path = find_ncu()
        except ToolNotFound:
            ncu_path = None

    failures: list[str] = []
    with _LOCK:
        extras = find_report_module(ncu_path) if ncu_path else None
        if extras is not None:
            builds = _loaded_builds()
            extension = _extension_of(extras.parent)
            if extension is not None and extension in builds:  # this very build is loaded: use it
                module = builds[extension]
                return _Reader("extras", _module_file(module), module)
            if extension is not None and _numpy_loaded():
                failures.append(f"{extras} not imported: {_NUMPY_FIRST}")
            elif extension is None or not builds:
                try:
                    module = _import_private(extras)
                    return _Reader("extras", _module_file(module), module)
                except Exception as exc:  # a broken or foreign module: fall back, and say why if all fails
                    failures.append(f"{extras}: {type(exc).__name__}: {exc}")
            else:
                module = next(iter(builds.values()))
                _reuse_warning(str(extras), module)
                return _Reader(_kind_of(module), _module_file(module), module)

        note = "; ".join(failures)
        builds = _loaded_builds()
        if "ncu_report" not in sys.modules and builds:
            module = next(iter(builds.values()))
            return _Reader(_kind_of(module), _module_file(module), module, note)
        try:
            module = _import_wheel()
            return _Reader("wheel", _module_file(module), module, note)
        except Exception as exc:
            failures.append(f"ncu_report (wheel): {type(exc).__name__}: {exc}")

    if ncu_path:
        return _Reader("csv", ncu_path, note="; ".join(failures))
    raise ReportError(
        None,
        "no way to read reports here: no ncu_report module imports and no ncu was found"
        + ("\n  " + "\n  ".join(failures) if failures else ""),
        "pip install ncu-report, or install Nsight Compute (or pass ncu=/path/to/ncu).",
    )


# --------------------------------------------------------------------------
# Reading through ncu_report
# --------------------------------------------------------------------------


@dataclass
class _Table:
    """Columns before they become a frame: identity lists, metric lists, units."""

    n: int
    identity: dict[str, list]
    metrics: dict[str, list]
    units: dict[str, str]

    def names(self) -> list[str]:
        return list(self.metrics)

    def select(self, names: Sequence[str], report: Path) -> "_Table":
        missing = [n for n in names if n not in self.metrics]
        if missing and self.n:
            raise _unknown_metrics_error(report, missing, list(self.metrics))
        for name in missing:
            self.metrics[name] = []
        return _Table(self.n, self.identity, {n: self.metrics[n] for n in names},
                      {n: self.units.get(n, "") for n in names})


class _Api:
    """The handful of ncu_report calls used, looked up once per module: the
    SWIG functions themselves where the module exposes them (a tenth faster
    than the methods that wrap them), else the methods."""

    def __init__(self, module: Any):
        action, metric = module.IAction, module.IMetric
        flat = getattr(module, "_ncu_report", None)

        def pick(cls: Any, method: str) -> Any:
            direct = getattr(flat, f"{cls.__name__}_{method}", None)
            return direct if callable(direct) else getattr(cls, method)

        self.metric_by_name = pick(action, "metric_by_name")
        self.metric_names = pick(action, "metric_names")
        self.kind = pick(metric, "kind")
        self.as_double = pick(metric, "as_double")
        self.as_uint64 = pick(metric, "as_uint64")
        self.as_string = pick(metric, "as_string")
        self.unit = pick(metric, "unit")
        # A metric with instance values only (e.g. FBSP.TriageCompute.* of the full set) reads as 0.0
        # but has no value: ncu's CSV leaves it empty. Asked only of zeros, so it costs little.
        self.has_value = pick(metric, "has_value") if hasattr(metric, "has_value") else (lambda m: True)
        self.name = action.name
        self.sections = getattr(action, "sections", None)  # ISection came with ncu 2024
        self.nvtx_state = getattr(action, "nvtx_state", None)
        self.demangled = action.NameBase_DEMANGLED
        self.mangled = action.NameBase_MANGLED
        self.floats = frozenset({metric.ValueKind_FLOAT, metric.ValueKind_DOUBLE})
        self.ints = frozenset({metric.ValueKind_UINT32, metric.ValueKind_UINT64})
        self.string = metric.ValueKind_STRING

    def value(self, m: Any) -> Any:
        kind = self.kind(m)
        if kind in self.floats:
            value = self.as_double(m)
        elif kind in self.ints:
            value = self.as_uint64(m)
        elif kind == self.string:
            return self.as_string(m)
        else:
            return None
        return None if value == 0 and not self.has_value(m) else value


def _read_api(report: Path, module: Any, specs: list[_Spec] | None, wanted_sections: list[str] | None,
              scan: _FileScan) -> _Table:
    try:
        context = module.load_report(str(report))
    except Exception as exc:
        raise ReportError(report, f"ncu_report could not open it ({type(exc).__name__}: {exc})",
                          "Check that it is a complete .ncu-rep file; `ncu --import FILE` may say more.") from exc
    api = _Api(module)
    located: list[tuple[int, Any]] = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions() if rng is not None else 0):
            located.append((r, rng.action_by_idx(a)))
    actions = [a for _, a in located]
    broken = [i for i, a in enumerate(actions) if api.name(a) is None]
    if broken or (scan.problem is not None and not actions):
        problem = scan.problem or f"is damaged: result {broken[0]} has no name and no metrics"
        raise ReportError(report, problem, _TRUNCATED_HINT)

    n = len(actions)
    universe_cache: list[str] = []

    def universe() -> list[str]:
        if not universe_cache:
            seen: dict[str, None] = {}
            for action in actions:
                seen.update(dict.fromkeys(api.metric_names(action)))
            universe_cache.extend(seen)
        return universe_cache

    if specs is None and wanted_sections is None:
        metrics, units = _read_all(actions, api)
    else:
        plan: dict[str, None] = {}
        if wanted_sections is not None:
            plan.update(dict.fromkeys(_section_metrics(report, actions, api, wanted_sections)))
        exact: list[str] = []
        if specs is not None:
            exact = [s.text for s in specs if s.kind == "name"]
            plan.update(dict.fromkeys(_resolve(specs, universe)))
        metrics, units = _read_some(actions, api, list(plan))
        missing = [name for name in exact if n and all(v is None for v in metrics[name])
                   and not any(api.metric_by_name(a, name) is not None for a in actions)]
        if missing:
            raise _unknown_metrics_error(report, missing, universe())

    identity = _identity(located, api, metrics, scan)
    return _Table(n, identity, metrics, units)


def _read_all(actions: Sequence[Any], api: _Api) -> tuple[dict[str, list], dict[str, str]]:
    """Every metric of every result: names once per result, one lookup per value."""
    n = len(actions)
    columns: dict[str, list] = {}
    units: dict[str, str] = {}
    by_name, kind, names = api.metric_by_name, api.kind, api.metric_names
    as_double, as_uint64, as_string, has_value = api.as_double, api.as_uint64, api.as_string, api.has_value
    floats, ints, string = api.floats, api.ints, api.string
    for i, action in enumerate(actions):
        for name in names(action):
            m = by_name(action, name)
            if m is None:
                continue
            k = kind(m)
            if k in floats or k in ints:
                value = as_double(m) if k in floats else as_uint64(m)
                if value == 0 and not has_value(m):
                    value = None
            elif k == string:
                value = as_string(m)
            else:
                value = None
            column = columns.get(name)
            if column is None:
                column = columns[name] = [None] * n
                units[name] = api.unit(m)
            column[i] = value
    return columns, units


def _read_some(actions: Sequence[Any], api: _Api, plan: Sequence[str]) -> tuple[dict[str, list], dict[str, str]]:
    """Only the metrics in ``plan``, by name, in that order."""
    n = len(actions)
    columns: dict[str, list] = {name: [None] * n for name in plan}
    units: dict[str, str] = {}
    by_name, value_of = api.metric_by_name, api.value
    for i, action in enumerate(actions):
        for name in plan:
            m = by_name(action, name)
            if m is None:
                continue
            columns[name][i] = value_of(m)
            if name not in units:
                units[name] = api.unit(m)
    for name in plan:
        units.setdefault(name, "")
    return columns, units


def _section_metrics(report: Path, actions: Sequence[Any], api: _Api, wanted: Sequence[str]) -> list[str]:
    """Metric names the wanted sections show (header, then body; ``breakdown:``
    items expanded into the metrics they list) that the report holds, in the
    order asked. A section's list is read from the first result that has it."""
    if api.sections is None:
        raise ReportError(report, "sections= needs IAction.sections(), which this ncu_report lacks",
                          "Read with a newer ncu_report (pip install -U ncu-report), or choose metrics= instead.")
    keys = list(dict.fromkeys(w.lower() for w in wanted))
    found: dict[str, list[str]] = {}
    available: dict[str, None] = {}
    for action in actions:
        held: set[str] | None = None
        for section in api.sections(action):
            identifier = section.identifier()
            available.setdefault(identifier, None)
            key = identifier.lower()
            if key not in keys or key in found:
                continue
            if held is None:
                held = set(api.metric_names(action))
            names: list[str] = []
            for m in list(section.header_metrics()) + list(section.body_metrics()):
                name = m.name()
                if name.startswith(_BREAKDOWN):
                    listed = api.value(m) if api.kind(m) == api.string else None
                    names.extend(x.strip() for x in (listed or "").split(",") if x.strip())
                else:
                    names.append(name)
            found[key] = [x for x in dict.fromkeys(names) if x in held]
        if len(found) == len(keys):
            break
    missing = [w for w in wanted if w.lower() not in found]
    if missing and actions:
        ids = list(available)
        close = sorted({c for w in missing for c in difflib.get_close_matches(w, ids, n=3, cutoff=0.5)})
        raise ReportError(
            report,
            f"section(s) not in this report: {', '.join(missing)}"
            + (f" (close: {', '.join(close)})" if close else ""),
            f"Its sections: {', '.join(ids) or 'none'}. Sections are the identifiers of `ncu --list-sections`; "
            "a report holds the ones it was profiled with (--section/--set).",
        )
    out: dict[str, None] = {}
    for key in keys:
        out.update(dict.fromkeys(found.get(key, ())))
    return list(out)


def _identity(located: Sequence[tuple[int, Any]], api: _Api, metrics: Mapping[str, list],
              scan: _FileScan) -> dict[str, list]:
    n = len(located)
    actions = [a for _, a in located]
    ident: dict[str, list] = {RESULT: list(range(n)), RANGE: [r for r, _ in located]}
    ident[FUNCTION] = [api.name(a) for a in actions]
    ident[DEMANGLED] = [api.name(a, api.demangled) for a in actions]
    ident[MANGLED] = [api.name(a, api.mangled) for a in actions]

    def column(metric: str) -> list:
        if metric in metrics:
            return metrics[metric]
        out: list = [None] * n
        for i, action in enumerate(actions):
            m = api.metric_by_name(action, metric)
            if m is not None:
                out[i] = api.value(m)
        return out

    for col, metric in _IDENTITY_METRICS.items():
        ident[col] = column(metric)
    ident[GRID_SIZE] = [_dims(x, y, z) for x, y, z in zip(ident[GRID_X], ident[GRID_Y], ident[GRID_Z])]
    ident[BLOCK_SIZE] = [_dims(x, y, z) for x, y, z in zip(ident[BLOCK_X], ident[BLOCK_Y], ident[BLOCK_Z])]
    ident[COMPUTE_CAPABILITY] = [None if a is None or b is None else f"{a}.{b}"
                                 for a, b in zip(column(_CC_MAJOR), column(_CC_MINOR))]

    processes = scan.processes
    if processes is not None and len(processes) != n:
        distinct = set(processes)
        processes = tuple(distinct) * n if len(distinct) == 1 else None
    ident[PROCESS] = [p.pid for p in processes] if processes else [None] * n
    ident[PROCESS_NAME] = [p.name for p in processes] if processes else [None] * n
    ident[HOST] = [p.host for p in processes] if processes else [None] * n

    nvtx_state = api.nvtx_state
    ident[NVTX] = [_nvtx_text(nvtx_state(a)) if nvtx_state else None for a in actions]
    return ident


def _dims(x: Any, y: Any, z: Any) -> str | None:
    if x is None or y is None or z is None:
        return None
    return f"({x}, {y}, {z})"


_DEFAULT_DOMAINS = ("", "<default domain>")  # ncu 2025.3.1 names the default domain "<default domain>"
# The CSV export's NVTX columns: `TID  "domain:name:..."  "domain:name:..."` per launch.
_CSV_PUSH_POP = "thread Domain:Push/Pop_Range"
_CSV_START_END = "Id:Domain:Start/Stop_Range"
_CSV_QUOTED = re.compile(r'"([^"]*)"')


def _nvtx_from_csv(push_pop: str | None, start_end: str | None) -> str | None:
    """The ``nvtx`` text (as :func:`_nvtx_text` writes it) from the CSV export's two NVTX cells."""
    stacks: dict[str, list[str]] = {}
    ranges: list[tuple[str, str]] = []
    for cell, into_stack in ((push_pop, True), (start_end, False)):
        for item in _CSV_QUOTED.findall(cell or ""):
            domain, _, rest = item.partition(":")
            name = rest.split(":", 1)[0]
            if not name or name == "none":
                continue
            if into_stack:
                stacks.setdefault(domain, []).append(name)
            else:
                ranges.append((domain, name))
    parts = [("" if d in _DEFAULT_DOMAINS else f"{d}@") + "/".join(names) for d, names in stacks.items()]
    parts += [("" if d in _DEFAULT_DOMAINS else f"{d}@") + name for d, name in ranges]
    return "; ".join(parts) or None


def _nvtx_text(state: Any) -> str | None:
    """One line for an ``INvtxState``: per domain, the push/pop stack as
    ``domain@outer/inner`` and each start/end range as ``domain@range``,
    joined by ``"; "`` (no ``domain@`` for the default domain); None when
    there is no state or no open range."""
    if state is None:
        return None
    parts: list[str] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        if domain is None:
            continue
        name = domain.name() or ""
        prefix = "" if name in _DEFAULT_DOMAINS else f"{name}@"
        stack = [r for r in domain.push_pop_ranges() if r]
        if stack:
            parts.append(prefix + "/".join(stack))
        parts.extend(prefix + r for r in domain.start_end_ranges() if r)
    return "; ".join(parts) or None


# --------------------------------------------------------------------------
# Reading through ncu --import --csv
# --------------------------------------------------------------------------

#: Timeout for ``ncu --import``; big reports take a while.
CSV_IMPORT_TIMEOUT_S = 600.0


def raw_csv_argv(ncu: str, report: str | os.PathLike) -> list[str]:
    """The command that prints a report's raw page as CSV, in base units."""
    return [ncu, "--import", os.fspath(report), "--csv", "--page", "raw", "--print-units", "base"]


def _read_csv(report: Path, ncu: str, runner: Callable[..., tuple[int, str]] = run_command) -> _Table:
    argv = raw_csv_argv(ncu, report)
    try:
        rc, text = runner(argv, CSV_IMPORT_TIMEOUT_S)
    except ToolError as exc:
        raise ReportError(report, f"ncu could not import it: {exc}", "Check the ncu installation.") from exc
    if rc != 0:
        tail = "\n".join(text.strip().splitlines()[-10:])
        raise ReportError(report, f"`{' '.join(argv)}` exited with status {rc}:\n{tail}",
                          "Check that the file is a complete .ncu-rep written by this ncu or an older one.")
    try:
        return _parse_csv_table(text)
    except ValueError as exc:
        raise ReportError(report, f"could not understand ncu's CSV ({exc})",
                          "Install the ncu_report module (pip install ncu-report) to read reports directly.") from exc


# CSV header -> identity column; what ncu prints before the metric columns.
_CSV_IDENTITY = {
    "ID": RESULT,
    "Process ID": PROCESS,
    "Process Name": PROCESS_NAME,
    "Host Name": HOST,
    "Kernel Name": DEMANGLED,
    "Context": CONTEXT,
    "Stream": STREAM,
    "Block Size": BLOCK_SIZE,
    "Grid Size": GRID_SIZE,
    "Device": DEVICE,
    "CC": COMPUTE_CAPABILITY,
}
_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)", re.IGNORECASE)
_GROUPED_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_INT_RE = re.compile(r"[+-]?\d+")
_MISSING_TEXT = frozenset({"", "n/a", "N/A", "no data"})  # "no data": a metric the module reads as None
_DIMS_RE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_raw_csv(text: str) -> "pandas.DataFrame":
    """The wide frame (same schema as :func:`load_report`) from the output of
    ``ncu --import FILE --csv --page raw [--print-units base]``.

    The first CSV row names the columns (identity columns such as ``"ID"``,
    ``"Kernel Name"``, ``"Block Size"``, then metric names), the second gives
    units (empty for identity columns), then one row per result. Lines before
    the header (``==PROF==``, ``==WARNING==``) and ``==``-lines after it are
    skipped. A metric column whose values are all numbers (thousands
    separators allowed, as ncu prints them outside base units) becomes int or
    float; ``""``, ``n/a`` and ``no data`` are missing. ``range`` and ``mangled``
    are None (the CSV does not carry them); ``nvtx`` is read from the CSV's
    NVTX columns (present with ``ncu --nvtx``) in the same form; ``function`` is the demangled name
    without return type, scope, template arguments and parameters. Units go
    to ``attrs["units"]`` as printed. ValueError when there is no header.
    """
    return _build_wide(_parse_csv_table(text))


def _parse_csv_table(text: str) -> _Table:
    import csv

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError('no header row (a line starting with "ID")')
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(body))
    header, rows = rows[0], rows[1:]
    units_row: list[str] = []
    if rows and not (rows[0] and _INT_RE.fullmatch(rows[0][0].strip())):
        units_row, rows = rows[0], rows[1:]
    width = len(header)
    rows = [row + [""] * (width - len(row)) if len(row) < width else row[:width] for row in rows]
    n = len(rows)
    cells = list(zip(*rows)) if rows else [()] * width

    identity: dict[str, list] = {col: [None] * n for col in IDENTITY_COLUMNS}
    metrics: dict[str, list] = {}
    units: dict[str, str] = {}
    nvtx_cells: dict[str, list[str]] = {}
    for index, name in enumerate(header):
        values = [v.strip() for v in cells[index]] if n else []
        if name.startswith((_CSV_PUSH_POP, _CSV_START_END)):
            nvtx_cells[_CSV_PUSH_POP if name.startswith(_CSV_PUSH_POP) else _CSV_START_END] = values
            continue
        target = _CSV_IDENTITY.get(name)
        if target is not None:
            identity[target] = _csv_identity(target, values)
            continue
        metrics[name] = _csv_metric(values)
        units[name] = units_row[index].strip() if index < len(units_row) else ""

    identity[FUNCTION] = [_function_from_demangled(d) if d else None for d in identity[DEMANGLED]]
    if nvtx_cells:
        identity[NVTX] = [_nvtx_from_csv(p, q) for p, q in zip(nvtx_cells.get(_CSV_PUSH_POP, [None] * n),
                                                               nvtx_cells.get(_CSV_START_END, [None] * n))]
    for size, (cx, cy, cz) in ((GRID_SIZE, (GRID_X, GRID_Y, GRID_Z)), (BLOCK_SIZE, (BLOCK_X, BLOCK_Y, BLOCK_Z))):
        parsed = [_DIMS_RE.fullmatch(s or "") for s in identity[size]]
        for k, col in enumerate((cx, cy, cz)):
            identity[col] = [int(m.group(k + 1)) if m else None for m in parsed]
        identity[size] = [_dims(*(int(g) for g in m.groups())) if m else s for m, s in zip(parsed, identity[size])]
    for col, metric in ((REGISTERS_PER_THREAD, "launch__registers_per_thread"),
                        (SHARED_MEM_STATIC, "launch__shared_mem_per_block_static"),
                        (SHARED_MEM_DYNAMIC, "launch__shared_mem_per_block_dynamic"),
                        (DEVICE_NAME, "device__attribute_display_name")):
        if metric in metrics:
            identity[col] = list(metrics[metric])
    return _Table(n, identity, metrics, units)


def _csv_identity(column: str, values: list[str]) -> list:
    if column in _INT_IDENTITY:
        return [int(v.replace(",", "")) if _INT_RE.fullmatch(v.replace(",", "")) else None for v in values]
    return [v if v not in _MISSING_TEXT else None for v in values]


def _csv_metric(values: list[str]) -> list:
    present = [v for v in values if v not in _MISSING_TEXT]
    if present and all(_NUMBER_RE.fullmatch(v) or _GROUPED_RE.fullmatch(v) for v in present):
        plain = [v.replace(",", "") if _GROUPED_RE.fullmatch(v) else v for v in values]
        if all(_INT_RE.fullmatch(v) for v in plain if v not in _MISSING_TEXT):
            return [None if v in _MISSING_TEXT else int(v) for v in plain]
        return [None if v in _MISSING_TEXT else float(v) for v in plain]
    return [None if v in _MISSING_TEXT else v for v in values]


def _function_from_demangled(name: str) -> str:
    """``void ns::kern<int, 4>(float *, int)`` -> ``kern``: what ncu's function
    name base shows."""
    s = name.strip()
    if s.endswith(")"):  # the parameter list: match its "(" from the end
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i].rstrip()
                break
    if s.endswith(">") and not s.endswith("operator>"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i].rstrip()
                break
    depth, cut = 0, 0
    for i, ch in enumerate(s):  # the last "::" or space outside template brackets
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and (ch == " " or (ch == ":" and s[i - 1:i + 1] == "::")):
            cut = i + 1
    return s[cut:] or name


# --------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------

_INT64_MAX = 2**63 - 1


def _column_kind(values: Sequence[Any]) -> str:
    """'float', 'int', 'nullable-int' or 'other' for a list of metric values."""
    seen_float = seen_int = seen_none = False
    for v in values:
        t = type(v)
        if t is float:
            seen_float = True
        elif t is int:
            if v > _INT64_MAX or v < -_INT64_MAX:
                return "other"
            seen_int = True
        elif v is None:
            seen_none = True
        else:
            return "other"
    if seen_float:
        return "float"
    if seen_int:
        return "nullable-int" if seen_none else "int"
    return "other"


#: Above this many columns, numeric columns are stacked into one 2-D block
#: each (float, int) rather than handed to pandas one by one.
_BLOCK_THRESHOLD = 64


def _build_wide(table: _Table) -> "pandas.DataFrame":
    """One frame in one go: lists become typed arrays (float64, int64, Int64,
    or left to pandas for strings and mixed), identity columns first."""
    import numpy as np
    import pandas as pd

    columns: dict[str, list] = {c: table.identity[c] for c in IDENTITY_COLUMNS}
    for name, values in table.metrics.items():
        columns.setdefault(name, values)
    kinds = {}
    for name, values in columns.items():
        kind = _column_kind(values)
        if kind == "other" and name in _INT_IDENTITY and all(v is None for v in values):
            kind = "nullable-int"
        kinds[name] = kind

    n = table.n
    if len(columns) <= _BLOCK_THRESHOLD:
        data = {name: _typed(values, kinds[name]) for name, values in columns.items()}
        frame = pd.DataFrame(data, index=pd.RangeIndex(n))
    else:
        parts = []
        for kind, dtype in (("float", np.float64), ("int", np.int64)):
            names = [c for c, k in kinds.items() if k == kind]
            if names:
                block = np.array([columns[c] for c in names], dtype=dtype).reshape(len(names), n).T
                parts.append(pd.DataFrame(block, columns=names))
        rest = {c: _typed(v, kinds[c]) for c, v in columns.items() if kinds[c] not in ("float", "int")}
        if rest:
            parts.append(pd.DataFrame(rest, index=pd.RangeIndex(n)))
        frame = pd.concat(parts, axis=1)[list(columns)]
    units = dict(IDENTITY_UNITS)
    units.update(table.units)
    frame.attrs["units"] = units
    return frame


def _typed(values: list, kind: str) -> Any:
    import numpy as np
    import pandas as pd

    if kind == "float":
        return np.array(values, dtype=np.float64)
    if kind == "int":
        return np.array(values, dtype=np.int64)
    if kind == "nullable-int":
        return pd.array(values, dtype="Int64")
    return values if values else np.array([], dtype=object)


def _build_tidy(table: _Table) -> "pandas.DataFrame":
    import pandas as pd

    ident = [table.identity[c] for c in TIDY_IDENTITY_COLUMNS]
    out: dict[str, list] = {}
    rows: list[int] = []
    names: list[str] = []
    values: list[Any] = []
    units: list[str] = []
    items = list(table.metrics.items())
    for i in range(table.n):
        for name, column in items:
            value = column[i]
            if value is not None:
                rows.append(i)
                names.append(name)
                values.append(value)
                units.append(table.units.get(name, ""))
    for col, source in zip(TIDY_IDENTITY_COLUMNS, ident):
        out[col] = [source[i] for i in rows]
    out[METRIC], out[VALUE], out[UNIT] = names, values, units
    frame = pd.DataFrame(out, columns=list(TIDY_COLUMNS))
    if table.n and all(v is None for v in table.identity[RANGE]):
        frame[RANGE] = frame[RANGE].astype("Int64")
    frame.attrs["units"] = {name: table.units.get(name, "") for name, _ in items}
    return frame

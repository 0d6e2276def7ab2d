"""What `nsys profile` is asked for, its command line (pure), and where its report files go."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from nsightwrap.errors import NsightwrapError, OptionsError
from nsightwrap.watch.files import DEFAULT_REPORT_DIR, wanted_report
from nsightwrap.watch.tree import StopPolicy

NSYS_SUFFIX = ".nsys-rep"
QDSTRM_SUFFIX = ".qdstrm"
SQLITE_SUFFIX = ".sqlite"

DEFAULT_TRACE = ("cuda", "nvtx", "osrt")
CAPTURE_RANGES = ("cudaProfilerApi", "nvtx")

_OUTPUT_FLAGS = ("-o", "--output", "-f", "--force-overwrite")


class RunSettings(Protocol):
    """What an nsys run reads of the config it is given: nsightwrap.RunConfig has all of it (RunConfig is
    ncu's, and nsys knows no ncu: the layers of the README's Layout), as has NSYS_DEFAULTS."""

    @property
    def timeout(self) -> Optional[float]: ...  # the total limit, seconds; None: none
    @property
    def stop(self) -> StopPolicy: ...
    @property
    def env(self) -> Optional[Mapping[str, str]]: ...  # None: this process's environment
    @property
    def cwd(self) -> Optional[str]: ...
    @property
    def report_dir(self) -> str: ...  # where a report goes unless output= names one (relative to cwd)


@dataclass(frozen=True)
class _Defaults:
    timeout: Optional[float] = None
    stop: StopPolicy = StopPolicy()
    env: Optional[Mapping[str, str]] = None
    cwd: Optional[str] = None
    report_dir: str = DEFAULT_REPORT_DIR


#: The settings of profile_nsys(config=None): those of RunConfig() (no total limit, the default stop, this
#: process's environment and folder, reports in DEFAULT_REPORT_DIR).
NSYS_DEFAULTS: RunSettings = _Defaults()


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
            lowered = str(cr).lower()
            canonical = {c.lower(): c for c in CAPTURE_RANGES}.get(lowered, "none" if lowered == "none" else None)
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

    def replace(self, **changes: Any) -> "NsysOptions":
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


def nsys_stem(path: Path) -> Path:
    """The report path without .nsys-rep."""
    name = path.name
    return path.with_name(name[: -len(NSYS_SUFFIX)] if name.endswith(NSYS_SUFFIX) else name)


def _taken(report: Path) -> bool:
    stem = nsys_stem(report)
    return any(stem.with_name(stem.name + s).exists() for s in (NSYS_SUFFIX, QDSTRM_SUFFIX, SQLITE_SUFFIX))


def unique_nsys_path(wanted: str | os.PathLike) -> Path:
    """`wanted`.nsys-rep, or NAME-N.nsys-rep when that (or its .qdstrm / .sqlite) exists."""
    path = Path(nsys_report_path(wanted))
    if not _taken(path):
        return path
    stem = nsys_stem(path).name
    n = 1
    while _taken(path.with_name(f"{stem}-{n}{NSYS_SUFFIX}")):
        n += 1
    return path.with_name(f"{stem}-{n}{NSYS_SUFFIX}")


def plan_nsys_report(options: NsysOptions, command: Sequence[str],
                     config: RunSettings) -> tuple[NsysOptions, Path, list[str]]:
    """Where this run's report goes (never an existing one), and options that say so."""
    notes = []
    wanted = wanted_report(options.output, command, NSYS_SUFFIX, report_dir=config.report_dir, cwd=config.cwd)
    path = unique_nsys_path(wanted)
    if options.output and path != Path(nsys_report_path(wanted)):
        notes.append(f"{nsys_report_path(wanted)} (or its .qdstrm/.sqlite) already exists and is kept; "
                     f"this run writes {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path = path.absolute()
    return options.replace(output=str(path)), path, notes


def input_report(report: str | os.PathLike) -> Path:
    """A report nsys can read (stats, export): an existing file that is not a raw .qdstrm."""
    path = Path(report)
    if path.name.endswith(QDSTRM_SUFFIX):
        raise NsightwrapError(f"{path} is a raw .qdstrm trace (nsys could not import it): import it first with "
                              "`QdstrmImporter -i FILE.qdstrm` (needs libdw.so.1), then use the .nsys-rep")
    if not path.exists():
        raise NsightwrapError(f"no such report: {path}")
    return path

"""Which ``ncu_report`` reads a report: finding and importing NVIDIA's module.

Reports are read with NVIDIA's ``ncu_report`` Python module. The one shipped
with the ncu install (``<install>/extras/python/ncu_report.py``; the install
is found from ``ncu=``, a path to ncu or to the install folder, for an
attempt the ncu its run used, else from
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
over for the wheel (or the CSV path), and ``df.attrs["reader_note"]``
says so.

When no ``ncu_report`` imports at all, ``ncu --import FILE --csv --page raw
--print-units base`` is run and its output parsed by :func:`nsightwrap.reports.ncu.csv.parse_raw_csv`
(no ``sections``, no ``range``/``mangled`` there; units as ncu
prints them).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nsightwrap.errors import ReportError, ToolError, ToolNotFound
from nsightwrap.ncu.locate import find_ncu
from nsightwrap.paths import tools_dir
from nsightwrap.watch.files import file_identity, keyed_file, read_keyed, write_keyed
from nsightwrap.watch.locate import run_command, version_key


@dataclass(frozen=True)
class Reader:
    """How this process reads reports: which module, from where, and why a better one was passed over."""

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
    its text; tracing one ``--version`` run shows the ``exec`` it does. That
    run starts ncu itself (a part of a second to seconds, and every walk read
    a report), so the answer is cached per file and mtime in this process and,
    across processes, in the per-user tool cache (_cached_targets).
    """
    try:
        with open(script, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return ()
    if not first.startswith(b"#!") or not re.search(rb"\b(sh|bash|dash)\b", first):
        return ()
    cached = _cached_targets(script)
    if cached is not None:
        return cached
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
    found = tuple(dict.fromkeys(out))
    if found:  # nothing found is traced again next time: an install may appear
        _store_targets(script, found)
    return found


# Bump when the cache file's shape changes, so old files are traced again.
_TARGETS_FORMAT = 1


def _targets_file(script: str) -> tuple[Path, dict[str, Any]] | None:
    """Where the traced targets of `script` are cached, and the script's identity (path, size, mtime)."""
    try:
        key = file_identity(script)
    except OSError:
        return None
    return keyed_file(tools_dir(), "ncu-wrapper", key), key


def _folders_of(targets: tuple[Path, ...]) -> dict[str, int]:
    """The mtime of each target's folder and the one above it: an install added beside it (a newer Nsight
    Compute the wrapper may pick at run time) changes them, and the cached answer is then traced again."""
    folders = dict.fromkeys(str(f) for t in targets for f in (t.parent, t.parent.parent))
    return {f: os.stat(f).st_mtime_ns for f in folders}


def _cached_targets(script: str) -> tuple[Path, ...] | None:
    """The targets an earlier process traced for `script`, while the script, the targets and their folders are
    unchanged; None for anything else (a bad cache never stops a read)."""
    where = _targets_file(script)
    data = read_keyed(where[0], _TARGETS_FORMAT, where[1]) if where is not None else None
    if data is None:
        return None
    try:
        targets = tuple(Path(t) for t in data["targets"])
        if not all(t.exists() for t in targets) or _folders_of(targets) != data["folders"]:
            return None
    except (OSError, KeyError, TypeError):
        return None
    return targets


def _store_targets(script: str, targets: tuple[Path, ...]) -> None:
    """Cached for the next process; caching is an optimisation, so failures are ignored."""
    where = _targets_file(script)
    if where is None:
        return
    try:
        folders = _folders_of(targets)
    except OSError:
        return
    write_keyed(where[0], _TARGETS_FORMAT, where[1], {"targets": [str(t) for t in targets], "folders": folders})


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
            for kit in sorted(kits, key=lambda k: version_key(os.path.basename(k)), reverse=True):
                yield Path(kit)


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


def choose_reader(ncu: str | os.PathLike | None) -> Reader:
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
                return Reader("extras", _module_file(module), module)
            if extension is not None and _numpy_loaded():
                failures.append(f"{extras} not imported: {_NUMPY_FIRST}")
            elif extension is None or not builds:
                try:
                    module = _import_private(extras)
                    return Reader("extras", _module_file(module), module)
                except Exception as exc:  # a broken or foreign module: fall back, and say why if all fails
                    failures.append(f"{extras}: {type(exc).__name__}: {exc}")
            else:
                module = next(iter(builds.values()))
                _reuse_warning(str(extras), module)
                return Reader(_kind_of(module), _module_file(module), module)

        note = "; ".join(failures)
        builds = _loaded_builds()
        if "ncu_report" not in sys.modules and builds:
            module = next(iter(builds.values()))
            return Reader(_kind_of(module), _module_file(module), module, note)
        try:
            module = _import_wheel()
            return Reader("wheel", _module_file(module), module, note)
        except Exception as exc:
            failures.append(f"ncu_report (wheel): {type(exc).__name__}: {exc}")

    if ncu_path:
        return Reader("csv", ncu_path, note="; ".join(failures))
    raise ReportError(
        None,
        "no way to read reports here: no ncu_report module imports and no ncu was found"
        + ("\n  " + "\n  ".join(failures) if failures else ""),
        "pip install ncu-report, or install Nsight Compute (or pass ncu=/path/to/ncu).",
    )

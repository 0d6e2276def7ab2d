"""What the installed ncu offers: its version, sets and sections.

Options are checked against what the installed ncu lists, not against a
hard-coded table, because sets and sections differ between versions and
users can add their own section files. Asking costs three ncu starts, so
the answer is cached per binary.
"""

from __future__ import annotations

import dataclasses
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from nsightwrap.errors import ToolError
from nsightwrap.paths import tools_dir
from nsightwrap.watch.files import file_identity, keyed_file, read_keyed, write_keyed
from nsightwrap.watch.locate import Runner, run_command

__all__ = [
    "NcuInfo",
    "Section",
    "SectionSet",
    "parse_table",
    "parse_version",
    "probe_ncu",
]


# Bump when NcuInfo's JSON shape changes so old cache files are re-probed.
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class SectionSet:
    """One row of ``ncu --list-sets``."""

    identifier: str
    sections: tuple[str, ...]
    enabled: bool
    estimated_metrics: int | None


@dataclass(frozen=True)
class Section:
    """One row of ``ncu --list-sections``; filename is as ncu prints it (may be elided with '...')."""

    identifier: str
    display_name: str
    enabled: bool
    filename: str


@dataclass(frozen=True)
class NcuInfo:
    """What one ncu binary offers, so options can be checked before a long launch."""

    path: str
    version: str
    build: str | None
    sets: tuple[SectionSet, ...]
    sections: tuple[Section, ...]

    @property
    def section_ids(self) -> tuple[str, ...]:
        return tuple(s.identifier for s in self.sections)

    @property
    def set_ids(self) -> tuple[str, ...]:
        return tuple(s.identifier for s in self.sets)

    def sections_of_set(self, name: str) -> tuple[str, ...]:
        """Sections a set expands to; KeyError names the known sets."""
        for s in self.sets:
            if s.identifier == name:
                return s.sections
        raise KeyError(f"unknown section set {name!r}; known sets: {', '.join(self.set_ids)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "NcuInfo":
        """Inverse of to_dict; raises (KeyError/TypeError/ValueError) on a malformed dict."""
        sets = tuple(
            SectionSet(
                identifier=str(s["identifier"]),
                sections=tuple(str(x) for x in s["sections"]),
                enabled=bool(s["enabled"]),
                estimated_metrics=None if s["estimated_metrics"] is None else int(s["estimated_metrics"]),
            )
            for s in data["sets"]
        )
        sections = tuple(
            Section(
                identifier=str(s["identifier"]),
                display_name=str(s["display_name"]),
                enabled=bool(s["enabled"]),
                filename=str(s["filename"]),
            )
            for s in data["sections"]
        )
        build = data["build"]
        return cls(
            path=str(data["path"]),
            version=str(data["version"]),
            build=None if build is None else str(build),
            sets=sets,
            sections=sections,
        )


# --------------------------------------------------------------------------
# Parsing ncu's output
# --------------------------------------------------------------------------

_RULE_RE = re.compile(r"^-+(?: -+)*\s*$")
_MESSAGE_RE = re.compile(r"^==[A-Z]+==")


def _columns(rule: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]


def _cells(line: str, columns: Sequence[tuple[int, int]]) -> list[str]:
    """Raw cells, padded to their width so a wrap at a space is not lost when
    the line's trailing whitespace was trimmed."""
    cells = []
    last = len(columns) - 1
    for i, (start, end) in enumerate(columns):
        raw = line[start:] if i == last else line[start:end]
        cells.append(raw.ljust(end - start))
    return cells


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of ncu's fixed-width tables (``--list-sets``, ``--list-sections``).

    ncu wraps long cells mid-word onto continuation lines whose first column
    is blank, and a continuation may begin with a space or a comma, so raw
    slices are joined first and stripped only at the end. The last column
    takes the rest of a line longer than its rule. Parsing stops at the first
    blank line after the rows; ``==PROF==``-style messages are skipped.
    Raises ValueError when there is no rule/header/rule block.
    """
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not _RULE_RE.match(lines[i]):
        i += 1
    if i >= len(lines):
        raise ValueError("no table found: no dashed rule line")
    columns = _columns(lines[i])
    # The header may itself wrap, so it is everything up to the second rule.
    j = i + 1
    while j < len(lines) and not _RULE_RE.match(lines[j]):
        j += 1
    if j >= len(lines) or j == i + 1:
        raise ValueError("no table found: expected rule, header, rule")
    header = [""] * len(columns)
    for line in lines[i + 1 : j]:
        header = [h + c for h, c in zip(header, _cells(line, columns))]
    names = [h.strip() for h in header]

    rows: list[list[str]] = []
    for line in lines[j + 1 :]:
        if not line.strip():
            if rows:
                break
            continue
        if _MESSAGE_RE.match(line):
            continue
        cells = _cells(line, columns)
        if cells[0].strip() or not rows:
            rows.append(cells)
        else:
            rows[-1] = [a + b for a, b in zip(rows[-1], cells)]
    return [{n: c.strip() for n, c in zip(names, row)} for row in rows]


_VERSION_RE = re.compile(
    r"Version\s+v?(?P<version>\d+(?:\.\d+)+)(?:\s*\(\s*build\s+(?P<build>[^)\s]+)\s*\))?",
    re.IGNORECASE,
)


def parse_version(text: str) -> tuple[str, str | None]:
    """(version, build) from ``ncu --version``; ValueError if there is none."""
    m = _VERSION_RE.search(text)
    if not m:
        raise ValueError("no 'Version X.Y.Z' line")
    return m.group("version"), m.group("build")


def _yes(value: str) -> bool:
    return value.strip().lower() in ("yes", "y", "true", "on", "1")


def _require(rows: list[dict[str, str]], columns: Sequence[str]) -> None:
    if not rows:
        raise ValueError("the table has no rows")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise ValueError(f"missing column(s) {missing}; found {list(rows[0])}")


def _parse_sets(text: str) -> tuple[SectionSet, ...]:
    rows = parse_table(text)
    _require(rows, ("Identifier", "Sections", "Enabled"))
    result = []
    for row in rows:
        estimate = row.get("Estimated Metrics", "").strip()
        result.append(
            SectionSet(
                identifier=row["Identifier"],
                sections=tuple(s.strip() for s in row["Sections"].split(",") if s.strip()),
                enabled=_yes(row["Enabled"]),
                estimated_metrics=int(estimate) if estimate.isdigit() else None,
            )
        )
    return tuple(result)


def _parse_sections(text: str) -> tuple[Section, ...]:
    rows = parse_table(text)
    _require(rows, ("Identifier",))
    return tuple(
        Section(
            identifier=row["Identifier"],
            display_name=row.get("Display Name", ""),
            enabled=_yes(row.get("Enabled", "")),
            filename=row.get("Filename", ""),
        )
        for row in rows
    )


# --------------------------------------------------------------------------
# Probing, with a cache
# --------------------------------------------------------------------------


def _load_cache(file: Path, key: Mapping[str, Any], path: str) -> NcuInfo | None:
    """None for anything unexpected: a bad cache must never stop a run."""
    data = read_keyed(file, _CACHE_FORMAT, key)
    try:
        info = NcuInfo.from_dict(data["info"]) if data is not None else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None if info is None else dataclasses.replace(info, path=path)


def _ask(runner: Runner, argv: list[str], parse: Callable[[str], Any]) -> Any:
    rc, text = runner(argv)
    if rc != 0:
        raise ToolError(f"`{' '.join(argv)}` exited with status {rc}. Its output:\n{text}")
    try:
        return parse(text)
    except ValueError as exc:
        raise ToolError(f"could not understand the output of `{' '.join(argv)}` ({exc}). Its output:\n{text}") from exc


def probe_ncu(
    path: str,
    cache_dir: Path | None = None,
    runner: Runner | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> NcuInfo:
    """Ask ncu for its version, sets and sections (three runs of ncu, side by
    side); cached because that takes about a second, and the answer only
    changes when the binary does. ``cache_dir`` defaults to ``$NSIGHTWRAP_CACHE_DIR`` or
    ``$XDG_CACHE_HOME/nsightwrap/tools`` (``~/.cache/nsightwrap/tools``), created 0700.
    """
    runner = run_command if runner is None else runner
    cache_dir = tools_dir(env) if cache_dir is None else Path(cache_dir)
    try:
        key: dict[str, Any] | None = file_identity(path)  # a reinstall or an upgrade changes it
    except OSError:
        key = None  # let the runner report the real problem
    if key is not None:
        cached = _load_cache(keyed_file(cache_dir, "ncu", key), key, path)
        if cached is not None:
            return cached

    # The three questions at once: on a machine where ncu has not run yet, each start loads its
    # libraries from disk (the first walk on a fresh GPU machine spent 4 s before its first rung).
    questions = (("--version", parse_version), ("--list-sets", _parse_sets), ("--list-sections", _parse_sections))
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        futures = [pool.submit(_ask, runner, [path, flag], parse) for flag, parse in questions]
        (version, build), sets, sections = (f.result() for f in futures)
    info = NcuInfo(path=path, version=version, build=build, sets=sets, sections=sections)
    if key is not None:
        write_keyed(keyed_file(cache_dir, "ncu", key), _CACHE_FORMAT, key, {"info": info.to_dict()})
    return info

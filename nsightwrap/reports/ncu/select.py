"""Which metrics and sections a caller asks for: parsed once, matched against a report's names.

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
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from nsightwrap.errors import ReportError, close_matches
from nsightwrap.status import REGEX_PREFIX

#: A body item of a section that stands for the metrics it lists (SpeedOfLight's breakdown tables).
BREAKDOWN = "breakdown:"


@dataclass(frozen=True)
class Spec:
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


def metric_specs(metrics: Any) -> list[Spec] | None:
    """``metrics=`` as specs, checked before the report is opened; None: every metric."""
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
        if text.startswith(REGEX_PREFIX):
            expr = text[len(REGEX_PREFIX):]
            try:
                specs.append(Spec("regex", text, re.compile(expr)))
            except re.error as exc:
                raise ReportError(None, f"metrics= {text!r} is not a valid regular expression ({exc})",
                                  "Fix the expression (Python re syntax).") from exc
        elif _GLOB_CHARS & set(text):
            specs.append(Spec("glob", text))
        else:
            specs.append(Spec("name", text))
    return specs


def section_ids(sections: Any) -> list[str] | None:
    """``sections=`` as a list of identifiers; None: no section asked for."""
    if sections is None:
        return None
    items = [sections] if isinstance(sections, str) else list(sections)
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise TypeError(f"sections must be section identifiers (non-empty str), not {item!r}")
        out.append(item.strip())
    return out


def resolve(specs: Sequence[Spec], names: Callable[[], Iterable[str]]) -> list[str]:
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


def unknown_metrics_error(report: Path, missing: Sequence[str], universe: Sequence[str]) -> ReportError:
    """The error for exact names the report lacks, each with its close matches."""
    lines = []
    for name in missing:
        close = close_matches(name, universe, n=5, cutoff=0.6)
        lines.append(f"  {name}" + (f"  (close: {', '.join(close)})" if close else ""))
    return ReportError(
        report,
        f"{len(missing)} metric(s) not in this report:\n" + "\n".join(lines),
        f"The report holds {len(universe)} metrics: list them with load_report(path).columns, or use a glob "
        "(dram__*) or regex:EXPR, which may match nothing without an error.",
    )

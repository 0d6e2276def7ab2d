"""Reading a report through ``ncu_report``: results, chosen metrics, sections, identity columns.

Only the metrics asked for are looked up; every metric of every result is
read in one pass when none are chosen. The SWIG functions are called
directly where the module offers them (see :class:`Api`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from nsightwrap.errors import ReportError, close_matches
from nsightwrap.reports.ncu.frame import Table
from nsightwrap.reports.ncu.scan import TRUNCATED_HINT, FileScan
from nsightwrap.reports.ncu.schema import (
    BLOCK_SIZE,
    BLOCK_X,
    BLOCK_Y,
    BLOCK_Z,
    CC_MAJOR,
    CC_MINOR,
    COMPUTE_CAPABILITY,
    DEFAULT_DOMAINS,
    DEMANGLED,
    FUNCTION,
    GRID_SIZE,
    GRID_X,
    GRID_Y,
    GRID_Z,
    HOST,
    IDENTITY_METRICS,
    MANGLED,
    NVTX,
    PROCESS,
    PROCESS_NAME,
    RANGE,
    RESULT,
    dims,
)
from nsightwrap.reports.ncu.select import BREAKDOWN, Spec, resolve, unknown_metrics_error


class Api:
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


def read_api(report: Path, module: Any, specs: list[Spec] | None, wanted_sections: list[str] | None,
              scan: FileScan) -> Table:
    """The results of ``report`` read with ``module``: chosen metrics (or all), their units, identity columns."""
    try:
        context = module.load_report(str(report))
    except Exception as exc:
        raise ReportError(report, f"ncu_report could not open it ({type(exc).__name__}: {exc})",
                          "Check that it is a complete .ncu-rep file; `ncu --import FILE` may say more.") from exc
    api = Api(module)
    located: list[tuple[int, Any]] = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions() if rng is not None else 0):
            located.append((r, rng.action_by_idx(a)))
    actions = [a for _, a in located]
    broken = [i for i, a in enumerate(actions) if api.name(a) is None]
    if broken or (scan.problem is not None and not actions):
        problem = scan.problem or f"is damaged: result {broken[0]} has no name and no metrics"
        raise ReportError(report, problem, TRUNCATED_HINT)

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
            plan.update(dict.fromkeys(resolve(specs, universe)))
        metrics, units = _read_some(actions, api, list(plan))
        missing = [name for name in exact if n and all(v is None for v in metrics[name])
                   and not any(api.metric_by_name(a, name) is not None for a in actions)]
        if missing:
            raise unknown_metrics_error(report, missing, universe())

    identity = _identity(located, api, metrics, scan)
    return Table(n, identity, metrics, units)


def _read_all(actions: Sequence[Any], api: Api) -> tuple[dict[str, list], dict[str, str]]:
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


def _read_some(actions: Sequence[Any], api: Api, plan: Sequence[str]) -> tuple[dict[str, list], dict[str, str]]:
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


def _section_metrics(report: Path, actions: Sequence[Any], api: Api, wanted: Sequence[str]) -> list[str]:
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
                if name.startswith(BREAKDOWN):
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
        close = sorted({c for w in missing for c in close_matches(w, ids, n=3, cutoff=0.5)})
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


def _identity(located: Sequence[tuple[int, Any]], api: Api, metrics: Mapping[str, list],
              scan: FileScan) -> dict[str, list]:
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

    for col, metric in IDENTITY_METRICS.items():
        ident[col] = column(metric)
    ident[GRID_SIZE] = [dims(x, y, z) for x, y, z in zip(ident[GRID_X], ident[GRID_Y], ident[GRID_Z])]
    ident[BLOCK_SIZE] = [dims(x, y, z) for x, y, z in zip(ident[BLOCK_X], ident[BLOCK_Y], ident[BLOCK_Z])]
    ident[COMPUTE_CAPABILITY] = [None if a is None or b is None else f"{a}.{b}"
                                 for a, b in zip(column(CC_MAJOR), column(CC_MINOR))]

    processes = scan.processes
    if processes is not None and len(processes) != n:
        distinct = set(processes)
        processes = tuple(distinct) * n if len(distinct) == 1 else None
    ident[PROCESS] = [p.pid for p in processes] if processes else [None] * n
    ident[PROCESS_NAME] = [p.name for p in processes] if processes else [None] * n
    ident[HOST] = [p.host for p in processes] if processes else [None] * n

    nvtx_state = api.nvtx_state
    ident[NVTX] = [nvtx_text(nvtx_state(a)) if nvtx_state else None for a in actions]
    return ident


def nvtx_text(state: Any) -> str | None:
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
        prefix = "" if name in DEFAULT_DOMAINS else f"{name}@"
        stack = [r for r in domain.push_pop_ranges() if r]
        if stack:
            parts.append(prefix + "/".join(stack))
        parts.extend(prefix + r for r in domain.start_end_ranges() if r)
    return "; ".join(parts) or None

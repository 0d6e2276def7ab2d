"""`nsightwrap triage`'s runs in the hang store: the one place their SQL lives, and their debug log.

The table ``triage_runs`` (schema version 5, nsightwrap.store.schema): one
row per run a triage made (each run without ncu, each sanitizer tool, the
ncu walk), rows of one triage sharing a ``triage_id``. ``record_triage``
writes rows, ``triage_rows`` reads them (by kernel or triage), and
``triage_log`` writes their part of the Markdown debug log: one attempt per
run (hypothesis, what was done, result, conclusion) and the key differences
between a working and a failing run (tool, settings, environment).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional, Sequence

from nsightwrap.ncu.names import same_kernel
from nsightwrap.secrets import mask_argv, mask_text
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment

__all__ = ["TRIAGE_COLUMNS", "TriageRecord", "record_triage", "triage_log", "triage_rows"]

#: Outcomes of a triage run that mean "it works" and "it fails" (the key-differences table compares them).
WORKING = ("finished", "clean", "ok")
FAILING = ("failed", "hung", "findings", "stalled", "hang")


@dataclass(frozen=True)
class TriageRecord:
    """One row of ``triage_runs`` (id and time are set by the store)."""

    triage_id: str
    command: tuple[str, ...]
    tool: str
    outcome: str
    kernel: str = "*"
    settings: dict = None  # type: ignore[assignment]  # JSON object; None: {}
    exit_code: Optional[int] = None
    elapsed_s: Optional[float] = None
    error: Optional[str] = None
    findings: Optional[int] = None
    hypothesis: str = ""
    conclusion: str = ""
    note: str = ""
    host: Optional[str] = None
    gpu: Optional[str] = None
    driver: Optional[str] = None
    id: Optional[int] = None
    time: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TRIAGE_COLUMNS = tuple(f.name for f in fields(TriageRecord))
_WRITTEN = tuple(c for c in TRIAGE_COLUMNS if c not in ("id",))
_INSERT = f"INSERT INTO triage_runs ({', '.join(_WRITTEN)}) VALUES ({', '.join('?' for _ in _WRITTEN)})"
_SELECT = f"SELECT {', '.join(TRIAGE_COLUMNS)} FROM triage_runs"


def _params(r: TriageRecord, env: Environment, time: str) -> list[Any]:
    values = dict(asdict(r), time=time, host=env.host, gpu=env.gpu, driver=env.driver,
                  command=json.dumps(mask_argv(list(r.command))),
                  settings=mask_text(json.dumps(r.settings or {}, sort_keys=True)),
                  note=mask_text(r.note), error=mask_text(r.error) if r.error else r.error)
    return [values[c] for c in _WRITTEN]


def record_triage(store: HangStore, records: Sequence[TriageRecord], env: Environment) -> int:
    """Write `records` (one transaction); the rows written."""
    now = store._now()
    store._write([(_INSERT, _params(r, env, now)) for r in records])
    return len(records)


def _row(row: Sequence[Any]) -> TriageRecord:
    d = dict(zip(TRIAGE_COLUMNS, row))
    try:
        d["command"] = tuple(json.loads(d["command"]))
        d["settings"] = json.loads(d["settings"] or "{}")
    except (TypeError, ValueError):
        d["command"], d["settings"] = (), {}
    return TriageRecord(**d)


def triage_rows(store: HangStore, *, kernel: Optional[str] = None,
                triage_id: Optional[str] = None) -> list[TriageRecord]:
    """Rows oldest first: of one triage, or of every triage in which `kernel` was named (all their runs,
    the working ones too), or all."""
    if triage_id is not None:
        rows = store._query(f"{_SELECT} WHERE triage_id = ? ORDER BY id", (triage_id,))
    else:
        rows = store._query(f"{_SELECT} ORDER BY id")
    found = [_row(r) for r in rows]
    if kernel is None or triage_id is not None:
        return found
    # The tracer names kernels in full ("void ns::k<float>(float*)"), ncu and people by function: k.
    ids = {r.triage_id for r in found if r.kernel == kernel or (r.kernel != "*" and same_kernel(r.kernel, kernel))}
    return [r for r in found if r.triage_id in ids]


def _settings(r: TriageRecord) -> str:
    s = {k: v for k, v in (r.settings or {}).items() if k not in ("run", "of", "env")}
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items())) or "-"


def _environment(r: TriageRecord) -> str:
    env = (r.settings or {}).get("env") or {}
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "as is"


def _result(r: TriageRecord) -> str:
    parts = [r.outcome]
    if r.exit_code is not None:
        parts.append(f"exit code {r.exit_code}")
    if r.elapsed_s is not None:
        parts.append(f"{r.elapsed_s:.1f} s")
    text = ", ".join(parts)
    if r.error:
        text += f"; {r.error}"
    if r.kernel != "*":
        text += f"; kernel {r.kernel}"
    return text + (f"; {r.note}" if r.note else "")


def _table(working: Optional[TriageRecord], failing: Optional[TriageRecord]) -> list[str]:
    if working is None or failing is None:
        which = "working" if working is None else "failing"
        return [f"No {which} triage run recorded: nothing to compare."]
    rows = (("tool", lambda r: r.tool), ("settings", _settings), ("environment", _environment),
            ("outcome", lambda r: r.outcome), ("error", lambda r: r.error or "-"),
            ("kernel", lambda r: r.kernel), ("elapsed", lambda r: f"{r.elapsed_s or 0:.1f} s"))
    lines = ["| | working | failing |", "|---|---|---|"]
    for label, get in rows:
        a, b = str(get(working)).replace("|", "\\|"), str(get(failing)).replace("|", "\\|")
        if a != b and label in ("tool", "settings", "environment"):
            a, b = f"**{a}**", f"**{b}**"
        lines.append(f"| {label} | {a} | {b} |")
    return lines


def triage_log(store: HangStore, kernel: str) -> list[str]:
    """The debug log's triage part for `kernel` (Markdown lines; none when it was never triaged)."""
    rows = triage_rows(store, kernel=kernel)
    if not rows:
        return []
    lines = ["## Triage: is it ncu or the kernel?", ""]
    for i, r in enumerate(rows, 1):
        what = shlex.join(r.command) if r.command else "(command not recorded)"
        lines += [f"### Triage attempt {i}: {r.tool} ({r.outcome})",
                  f"*triage {r.triage_id[:8]}; {r.time}; settings {_settings(r)}; environment {_environment(r)}*", "",
                  f"**Hypothesis:** {r.hypothesis or '-'}", "",
                  f"**What we did:** `{what}` ({r.tool})", "",
                  f"**Result:** {_result(r)}", "",
                  f"**Conclusion:** {r.conclusion or '-'}", ""]
    runs = [r for r in rows if r.tool != "triage"]  # the verdict's own row is no run
    failing = next((r for r in runs if r.outcome in FAILING), None)
    same = [r for r in runs if r.outcome in WORKING and failing is not None and r.tool == failing.tool]
    working = same[-1] if same else next((r for r in reversed(runs) if r.outcome in WORKING), None)
    lines += ["## Key differences between a working and a failing triage run", ""]
    lines += _table(working, failing) + [""]
    return lines

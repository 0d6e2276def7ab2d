"""A Markdown debug log of one kernel, written from the hang store.

The log follows the form engineers use for such investigations: one
section per attempt (hypothesis, what was done, result, conclusion), a
table of the differences between the newest working and hanging settings,
and what to try next. Hypotheses are generated from the order of the
attempts: the first says the settings work; a later one says that the
change from the last hanging settings (or the last working ones) avoids the
hang. Untrusted records (foreign processes held the GPU) are listed,
marked, and never used for the comparison or the advice.
"""

from __future__ import annotations

import re
import shlex
from typing import Optional, Sequence

from nsightwrap.ncu.attempt import SERIALISED
from nsightwrap.ncu.names import cut_short, normalize_kernel, uncut
from nsightwrap.secrets import mask_text
from nsightwrap.status import (
    CRASHED,
    ERROR,
    HANG,
    HANG_OUTCOMES,
    INTERRUPTED,
    NO_KERNELS,
    OK,
    ONE_RANK,
    RANGE_MODES,
    SKIPPED,
    TIMEOUT,
    ReplayMode,
)
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey
from nsightwrap.store.schema import Record
from nsightwrap.store.triage import triage_log

__all__ = ["debug_log", "key_change", "key_flags"]

UNTRUSTED = "(untrusted: foreign GPU processes were present)"
#: The one metric with the fewest passes: the smallest thing ncu can collect.
MINIMAL_METRIC = "gpu__time_duration.sum"

_CONCLUSIONS = {
    TIMEOUT: "{d} did not finish within the time limit: slow or hung, not told apart",
    ERROR: "ncu failed with {d}; not a hang (see the result)",
    CRASHED: "the program failed under ncu with {d}; not a hang",
    NO_KERNELS: "this kernel was not profiled with {d}: check the kernel filter (or, for range replay, "
                  "that the program marks ranges)",
    INTERRUPTED: "interrupted before a verdict: nothing learned about {d}",
    SKIPPED: "not run: {d} was already known to hang here",
}


def _code(text: str) -> str:
    """Inline code that survives backticks in the text."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _s(value: Optional[float]) -> str:
    return "?" if value is None else f"{value:.1f}"


def _names(items: Sequence[str]) -> str:
    return "+".join(items)


def _join(parts: Sequence[str]) -> str:
    parts = list(parts)
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def key_change(old: ProfileKey, new: ProfileKey) -> str:
    """How ``new`` differs from ``old``, as a phrase: "replacing set full with
    set basic", "dropping sections A and switching to range replay"."""
    parts = []
    if old.set != new.set:
        if old.set and new.set:
            parts.append(f"replacing set {old.set} with set {new.set}")
        elif old.set:
            parts.append(f"dropping set {old.set}")
        else:
            parts.append(f"adding set {new.set}")
    for label, a, b in (("sections", old.sections, new.sections), ("metrics", old.metrics, new.metrics)):
        dropped = [x for x in a if x not in b]
        added = [x for x in b if x not in a]
        if dropped:
            parts.append(f"dropping {label} {_names(dropped)}")
        if added:
            verb = "profiling only" if (old.set and not new.set and not a) else "adding"
            parts.append(f"{verb} {label} {_names(added)}")
    if old.replay_mode != new.replay_mode:
        parts.append(f"switching to {new.replay_mode} replay")
    if old.ranks != new.ranks:
        parts.append("profiling one rank alone" if new.ranks == ONE_RANK else "profiling every rank")
    return _join(parts) or "the same settings"


def key_flags(key: ProfileKey) -> str:
    """The ncu / ``nsightwrap run`` options of a key."""
    flags = []
    if key.set:
        flags += ["--set", key.set]
    for s in key.sections:
        flags += ["--section", s]
    if key.metrics:
        flags += ["--metrics", ",".join(key.metrics)]
    if key.replay_mode != ReplayMode.KERNEL:
        flags += ["--replay-mode", key.replay_mode]
    if key.ranks == ONE_RANK:
        flags += ["--rank", "0"]
    return shlex.join(flags)


class _Attempt:
    """The records of one run for this kernel (several launches give several rows)."""

    def __init__(self, records: list[Record]):
        self.records = records
        hung = [r for r in records if r.hung]
        self.main = hung[-1] if hung else records[-1]
        self.others = [r for r in records if r is not self.main]

    @property
    def key(self) -> ProfileKey:
        return self.main.profile_key

    @property
    def outcome(self) -> str:
        return self.main.outcome

    @property
    def trusted(self) -> bool:
        return self.main.trusted


def _group(records: list[Record]) -> list[_Attempt]:
    """Oldest first; rows of one run (same run_id) of the same kernel are one attempt."""
    groups: list[list[Record]] = []
    index: dict[tuple[str, str], int] = {}
    for r in records:
        if r.run_id is not None and (r.run_id, r.kernel) in index:
            groups[index[r.run_id, r.kernel]].append(r)
            continue
        if r.run_id is not None:
            index[r.run_id, r.kernel] = len(groups)
        groups.append([r])
    return [_Attempt(g) for g in groups]


def _hypothesis(a: _Attempt, earlier: list[_Attempt], kernel: str) -> str:
    d = a.key.describe()
    if a.outcome == SKIPPED:
        return f"{d} is already known to hang here, so it need not be run"
    trusted = [e for e in earlier if e.trusted and e.outcome in (OK, *HANG_OUTCOMES)]
    same = [e for e in trusted if e.key == a.key]
    if same:
        prev = same[-1]
        return (f"the earlier result with {d} ({prev.outcome}, attempt {earlier.index(prev) + 1}) "
                "is reproducible")
    hangs = [e for e in trusted if e.outcome in HANG_OUTCOMES]
    if hangs:
        return f"{key_change(hangs[-1].key, a.key)} avoids the hang"
    oks = [e for e in trusted if e.outcome == OK]
    if oks:
        return f"{key_change(oks[-1].key, a.key)} still profiles {kernel} without hanging"
    return f"{d} profiles {kernel} without hanging"


def _result(a: _Attempt) -> str:
    r = a.main
    if r.outcome == HANG or (r.outcome in HANG_OUTCOMES and r.stall_s is not None):
        info = f"no progress for {_s(r.stall_s)} s"
        info += (f" (allowance {_s(r.allowance_s)} s {r.basis})" if r.basis and r.allowance_s is not None
                 else " (not calibrated)")
    elif r.passes_reached is not None:
        info = f"{r.passes_reached} passes"
    else:
        info = "no passes recorded"
    text = f"{r.outcome}, {info}, {_s(r.elapsed_s)} s"
    if r.note:
        text += f"; {r.note}"
    for o in a.others:
        text += f" (another launch: {o.outcome}" + (f", {o.passes_reached} passes" if o.passes_reached else "")
        text += ")"
    return text


def _conclusion(a: _Attempt) -> str:
    d = a.key.describe()
    r = a.main
    if r.outcome == OK:
        text = f"works: {d} profiles this kernel" + (f" ({r.passes_reached} passes)" if r.passes_reached else "")
    elif r.outcome == HANG:
        text = f"{d} hangs on this kernel"
    else:
        text = _CONCLUSIONS.get(r.outcome, "{d}: " + r.outcome).format(d=d)
    if not a.trusted:
        text = f"not counted {UNTRUSTED}; it would say: {text}"
    return text


def _header_value(values: Sequence[Optional[str]]) -> str:
    seen = []
    for v in values:
        if v and v not in seen:
            seen.append(v)
    return " / ".join(seen) if seen else "unknown"


#: Rows of the key-differences table; the first _COMPARED are settings, shown in bold where they differ.
_ROWS = ("set", "sections", "metrics", "replay mode", "ranks profiled", "processes", "passes", "elapsed")
_COMPARED = 6


def _table(working: Optional[_Attempt], hanging: Optional[_Attempt]) -> list[str]:
    if working is None and hanging is None:
        return ["No trusted verdict (ok or hang) recorded yet: nothing to compare."]
    if working is None:
        lead = ["No trusted working settings recorded yet; the hanging ones were:", ""]
    elif hanging is None:
        lead = ["No trusted hang recorded for this kernel; the working settings were:", ""]
    else:
        lead = []

    def values(a: Optional[_Attempt]) -> list[str]:
        if a is None:
            return [""] * len(_ROWS)
        k, r = a.key, a.main
        passes = (str(r.passes_reached) if r.passes_reached is not None
                  else f"stalled after {_s(r.stall_s)} s" if r.stall_s is not None else "-")
        job = f"{r.processes}" + (f" on {r.gpus} GPU{'s' if r.gpus != 1 else ''}" if r.gpus else "")
        return [k.set or "-", ", ".join(k.sections) or "-", ", ".join(k.metrics) or "-", k.replay_mode,
                "one alone" if k.ranks == ONE_RANK else "all", job, passes, f"{_s(r.elapsed_s)} s"]

    w, h = values(working), values(hanging)
    head_w = f"working ({working.key.describe()})" if working else "working (none yet)"
    head_h = f"hanging ({hanging.key.describe()})" if hanging else "hanging (none yet)"
    lines = lead + [f"| | {_cell(head_w)} | {_cell(head_h)} |", "|---|---|---|"]
    for i, label in enumerate(_ROWS):
        a, b = w[i], h[i]
        if working and hanging and i < _COMPARED and a != b:
            a, b = f"**{a}**", f"**{b}**"
        lines.append(f"| {label} | {_cell(a)} | {_cell(b)} |")
    return lines


def _one_rank_step(run: str, working: Optional[_Attempt], hanging: Optional[_Attempt]) -> list[str]:
    """A hang of a multi-process job with every rank profiled: say why, and how to profile one rank."""
    if hanging is None or hanging.main.processes < 2 or hanging.key.ranks == ONE_RANK or (
            working is not None and working.key.ranks == ONE_RANK):
        return []
    return [f"it hung in a job of {hanging.main.processes} processes with every rank profiled: {SERIALISED}. "
            "Profile it on one rank with a single-pass collection: "
            f"{_code(run + ' --rank 0 --metrics ' + MINIMAL_METRIC + ' -- <your launcher command>')}"]


def _next_steps(kernel: str, attempts: list[_Attempt], records: list[Record], working: Optional[_Attempt],
                hanging: Optional[_Attempt]) -> list[str]:
    trusted = [a for a in attempts if a.trusted]
    hung = [a for a in trusted if a.outcome in HANG_OUTCOMES]
    worked = [a for a in trusted if a.outcome == OK]
    tried = {a.key for a in trusted if a.outcome in (OK, *HANG_OUTCOMES)}
    if cut_short(kernel):  # ncu truncated the name: select by its start
        k = shlex.quote("^" + re.escape(uncut(kernel)))
        run = f"python -m nsightwrap run --kernel {k}"
    else:
        k = shlex.quote(kernel)
        run = f"python -m nsightwrap run --kernel-name {k}"
    steps = []
    if not attempts:
        steps.append(f"profile it with a small set first: {_code(run + ' --set basic -- <your program>')}")
    hung_keys = [a.key for a in hung if a.outcome == HANG]
    steps += _one_rank_step(run, working, hanging)
    if hung and not worked:
        basic = ProfileKey("basic")
        if basic not in tried:
            steps.append(f"try a smaller set: {_code('--set basic')}")
        minimal = ProfileKey(metrics=(MINIMAL_METRIC,))
        if minimal not in tried:
            steps.append(f"try one metric alone, the fewest passes: {_code('--metrics ' + MINIMAL_METRIC)}")
        if not any(key.replay_mode in RANGE_MODES for key in tried):
            steps.append(f"try range replay: {_code('--replay-mode range')} (the program must mark the range, "
                         "with cudaProfilerStart/Stop or NVTX; ncu suggests this itself when a launch seems "
                         "to hang)")
        small = [key for key in hung_keys
                 if key.replay_mode == ReplayMode.KERNEL and (key.set == "basic" or (not key.set and len(key.sections)
                                                                              + len(key.metrics) <= 1))]
        if small:
            steps.append(f"even {small[-1].describe()} hangs: the kernel probably waits for the host (a flag "
                         "the host sets after the launch), which kernel replay never lets happen. Profile a "
                         "range that holds the launch and the host's action (range or app-range replay), or "
                         f"leave this kernel out ({_code('--kernel-name regex:...')} or {_code('--launch-skip')})")
    if hanging is not None and working is not None:
        h, w = hanging.key, working.key
        if h.set and h.set != w.set:
            steps.append(f"find which sections of set {h.set} hang: "
                         f"{_code(f'python -m nsightwrap sweep-sections --kernel {k} --set {h.set} -- <your program>')}"
                         f" (or add sections of set {h.set} missing from {w.describe()} one at a time; "
                         f"{_code('ncu --list-sets')} lists them)")
        untried = [s for s in h.sections if ProfileKey(sections=(s,), replay_mode=h.replay_mode) not in tried]
        if len(h.sections) > 1 and untried:
            steps.append("try each of sections " + ", ".join(h.sections) + " alone, not yet tried: "
                         + ", ".join(_code(f"--section {s}") for s in untried))
        if len(h.metrics) > 1:
            steps.append("split the metrics: try " + " and ".join(
                _code("--metrics " + ",".join(half)) for half in (h.metrics[:len(h.metrics) // 2],
                                                                   h.metrics[len(h.metrics) // 2:])))
        if h.replay_mode == ReplayMode.KERNEL and not any(key.replay_mode in RANGE_MODES for key in tried):
            ranged = ProfileKey(h.set, h.sections, h.metrics, ReplayMode.RANGE.value)
            steps.append(f"try the hanging settings in range replay: {_code(key_flags(ranged))} (the program "
                         "must mark the range with cudaProfilerStart/Stop or NVTX)")
        use = f"{run} {key_flags(w)} -- <your program>"
        steps.append(f"to profile this kernel now, use the working settings: {_code(use)}")
    if worked and not hung:
        steps.append(f"nothing hung: {worked[-1].key.describe()} works here; richer sets may be tried "
                     "(a hang is stopped and recorded, so it costs one stall timeout)")
    timeouts = [a for a in trusted if a.outcome == TIMEOUT]
    if timeouts:
        steps.append(f"{len(timeouts)} timeout(s) are not proof of a hang: rerun with a larger "
                     f"{_code('--timeout')} and let the stall detector tell slow from hung")
    untrusted = [r for r in records if not r.trusted]
    if untrusted:
        steps.append(f"{len(untrusted)} record(s) were made while foreign processes held the GPU and are not "
                     f"counted: check {_code('nvidia-smi')}, stop those processes (run "
                     f"{_code('python -m nsightwrap cleanup')} for leftovers of nsightwrap runs), then repeat "
                     "those settings")
    drivers = sorted({r.driver for r in records if r.driver})
    if len(drivers) > 1:
        steps.append(f"these records come from drivers {', '.join(drivers)}: repeat the hanging settings on "
                     "the current driver before trusting them")
    failures = [a for a in trusted if a.outcome in (ERROR, CRASHED, NO_KERNELS)]
    if failures and not hung and not worked:
        steps.append("no run reached a verdict: fix the error first (see the results above), e.g. with "
                     f"{_code('python -m nsightwrap doctor')}")
    return steps


def debug_log(store: HangStore, kernel: str, env: Optional[Environment] = None) -> str:
    """Markdown for one kernel: its attempts, the working/hanging comparison,
    and what to try next. Records of kernels with the same pattern
    (normalize_kernel) are included; with ``env``, only those on the same GPU
    model and ncu version."""
    records = list(reversed(store.records(pattern=kernel)))
    if env is not None:
        records = [r for r in records if r.gpu == env.gpu and r.ncu_version == env.ncu_version]
        gpu, driver, ncu = env.gpu or "unknown GPU", env.driver or "unknown", env.ncu_version or "unknown"
    else:
        gpu = _header_value([r.gpu for r in records]).replace("unknown", "unknown GPU")
        driver = _header_value([r.driver for r in records])
        ncu = _header_value([r.ncu_version for r in records])
    lines = [f"# Debug log: {kernel} on {gpu} (driver {driver}, ncu {ncu})", ""]
    names = sorted({r.kernel for r in records} - {kernel})
    if names:
        lines += [f"Includes records of kernels with the same pattern {_code(normalize_kernel(kernel))}: "
                  + ", ".join(_code(n) for n in names) + ".", ""]
    attempts = _group(records)
    if not attempts:
        lines += ["No records of this kernel" + (" on this GPU and ncu version" if env else "") + ".", ""]
    for i, a in enumerate(attempts, 1):
        r = a.main
        mark = f" {UNTRUSTED}" if not a.trusted else ""
        lines.append(f"## Attempt {i}: {a.key.describe()} ({a.outcome}){mark}")
        where = [f"record {', '.join(str(x.id) for x in a.records)}", r.time]
        if r.kernel != kernel:
            where.append(f"kernel {r.kernel}")
        if r.host:
            where.append(f"host {r.host}")
        if r.processes > 1:
            where.append(f"{r.processes} processes" + (f" on {r.gpus} GPUs" if r.gpus else ""))
        if env is not None and r.driver != env.driver:
            where.append(f"driver {r.driver or 'unknown'}")
        if r.ladder or r.rung:
            where.append(f"ladder {r.ladder or '-'}, rung {r.rung or '-'}")
        lines += [
            f"*{'; '.join(where)}*",
            "",
            f"**Hypothesis:** {_hypothesis(a, attempts[:i - 1], kernel)}",
            "",
            f"**What we did:** {_code(shlex.join(r.command)) if r.command else '(command not recorded)'}",
            "",
            f"**Result:** {_result(a)}",
            "",
            f"**Conclusion:** {_conclusion(a)}",
            "",
        ]
    trusted = [a for a in attempts if a.trusted]
    working = next((a for a in reversed(trusted) if a.outcome == OK), None)
    hanging = next((a for a in reversed(trusted) if a.outcome == HANG), None) or next(
        (a for a in reversed(trusted) if a.outcome in HANG_OUTCOMES), None)
    lines += ["## Key differences between working and hanging settings", ""]
    lines += _table(working, hanging) + [""]
    lines += triage_log(store, kernel)  # `nsightwrap triage`'s runs of this kernel, if any
    lines += ["## What to try next", ""]
    steps = _next_steps(kernel, attempts, records, working, hanging)
    lines += [f"- {s}" for s in steps] or ["- nothing: these records give no advice"]
    return mask_text("\n".join(lines).rstrip() + "\n")  # the records' commands are masked already; so is the rest

"""compute-sanitizer under the watchdog: memcheck, racecheck, synccheck, initcheck.

`run_sanitizer(command, tool)` finds compute-sanitizer (find_sanitizer), builds its command line in a pure
function (sanitizer_argv, from one frozen SanitizerOptions), runs it under nsightwrap.watch (tree stop,
nothing left behind, output followed while it runs) with a stall rule scaled by the tool's slowdown
(diagnose.slowdown), reads its text as it comes (diagnose.findings) and returns a SanitizerRun: status,
exit code, findings as a DataFrame, a one-line summary ("memcheck: 0 errors" for a clean run), to_dict().
Findings printed before a stop are kept.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from nsightwrap.diagnose.findings import Finding, FindingsParser, Summary, findings_frame
from nsightwrap.diagnose.slowdown import (
    DEFAULT_SLOWDOWN_POLICY,
    SanitizerStall,
    SlowdownPolicy,
    host_seconds,
    kernel_seconds,
)
from nsightwrap.errors import OptionsError, ToolError
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.options import KernelFilter
from nsightwrap.status import CRASHED, ERROR, EXIT_CODES, HANG, INTERRUPTED, OK, REGEX_PREFIX, TIMEOUT
from nsightwrap.watch.locate import DEFAULT_CUDA_ROOT, Runner, run_command, search_tool
from nsightwrap.watch.rules import RunState, TotalTimeout, WatchRule
from nsightwrap.watch.run import RunOutcome, watch
from nsightwrap.watch.tree import StopPolicy

__all__ = ["ENV_SANITIZER", "FRONTEND_NAMES", "SANITIZER", "SanitizerListener", "SanitizerOptions", "SanitizerRun",
           "TOOLS", "filter_argv", "filter_name", "find_sanitizer", "headline", "run_sanitizer", "sanitizer_argv",
           "sanitizer_version", "summary_line"]

SANITIZER = "compute-sanitizer"
ENV_SANITIZER = "NSIGHTWRAP_SANITIZER"
FRONTEND_NAMES = (SANITIZER,)
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
RACECHECK_REPORTS = ("analysis", "hazard", "all")

_HINT = ("compute-sanitizer ships with the CUDA toolkit (<cuda>/bin/compute-sanitizer); install the toolkit, "
         f"or point nsightwrap at it: set {ENV_SANITIZER}=/path/to/compute-sanitizer or pass sanitizer=PATH "
         "(--sanitizer PATH).")


def find_sanitizer(explicit: Optional[str] = None, env: Optional[Mapping[str, str]] = None, *,
                   ncu: Optional[str] = None, cuda_root: str = DEFAULT_CUDA_ROOT) -> str:
    """Absolute path of compute-sanitizer: `explicit`, $NSIGHTWRAP_SANITIZER, PATH, $CUDA_HOME/bin,
    <cuda_root>/bin, then next to the ncu found (`ncu`: its path) and in <cuda_root>/compute-sanitizer/."""
    env = os.environ if env is None else env
    installs = [(os.path.join(cuda_root, SANITIZER, SANITIZER), lambda p: "")]
    if ncu:
        installs.insert(0, (os.path.join(os.path.dirname(os.path.realpath(ncu)), SANITIZER), lambda p: ""))
    return search_tool(SANITIZER, explicit, "sanitizer=", ENV_SANITIZER, env, cuda_root, installs, _HINT)


def sanitizer_version(path: str, runner: Runner = run_command) -> str:
    """`2025.3.1.0` from `compute-sanitizer --version` (`... Version 2025.3.1.0`)."""
    code, out = runner([path, "--version"])
    m = re.search(r"Version\s+(\d[\w.]*)", out)
    if code != 0 or not m:
        raise ToolError(f"`{path} --version` answered {out.strip()[-300:]!r} (exit {code}), not a version: "
                        "check that this is NVIDIA's compute-sanitizer, or name another with sanitizer=PATH.")
    return m.group(1)


@dataclass(frozen=True)
class SanitizerOptions:
    """compute-sanitizer's settings, validated once (STYLE 4).

    print_limit: --print-limit (what is printed, not what is counted); error_exitcode: --error-exitcode
    (compute-sanitizer's exit status when it found errors); launch_timeout: --launch-timeout SEC (0 waits
    for ever for the target to connect); racecheck_report: analysis | hazard | all (hazard and all list
    each hazard, about 6x slower); extra: more arguments passed as they are, before the program.
    """

    print_limit: Optional[int] = None
    error_exitcode: Optional[int] = None
    launch_timeout: Optional[float] = None
    racecheck_report: Optional[str] = None
    extra: tuple[str, ...] = ()
    #: kernels left unchecked (--kernel-name-exclude): KernelFilter objects or their text ("exact:NAME")
    exclude: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        for name in ("print_limit", "error_exitcode"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise OptionsError(f"{name}={value!r} must be a whole number >= 0 (or None: the tool's default).")
        if self.launch_timeout is not None and not self.launch_timeout >= 0:
            raise OptionsError(f"launch_timeout={self.launch_timeout!r} must be >= 0 seconds (0: wait for ever).")
        if self.racecheck_report is not None and self.racecheck_report not in RACECHECK_REPORTS:
            raise OptionsError(f"racecheck_report={self.racecheck_report!r}: choose one of "
                               f"{', '.join(RACECHECK_REPORTS)}.")
        object.__setattr__(self, "extra", tuple(str(a) for a in self.extra))
        excluded = tuple(e if isinstance(e, KernelFilter) else KernelFilter.from_user(e, exact=True)
                         for e in self.exclude)
        for e in excluded:
            filter_name(e)  # refused now, not at launch
        object.__setattr__(self, "exclude", excluded)

    @property
    def hazard_report(self) -> bool:
        return self.racecheck_report in ("hazard", "all")


_REGEX_LITERAL = re.compile(r"^\^?([A-Za-z_][A-Za-z0-9_]*)\$?$")


def filter_name(kernel_filter: KernelFilter) -> str:
    """The name compute-sanitizer matches for `kernel_filter`: its pattern, or the one literal name of a
    regular expression (`^gemm`, `gemm$`); compute-sanitizer has no regular expressions."""
    name = kernel_filter.pattern
    if kernel_filter.regex:
        m = _REGEX_LITERAL.match(name)
        if not m:
            raise OptionsError(f"kernel filter {kernel_filter.value!r}: compute-sanitizer matches a substring of the "
                               "kernel's name, not a regular expression; give one function name "
                               "(e.g. 'exact:fused_attn' or 'regex:^fused_attn').")
        name = m.group(1)
    if "," in name or "=" in name:
        raise OptionsError(f"kernel filter {name!r}: compute-sanitizer's --kernel-name cannot hold ',' or '='; "
                           "give the function name alone.")
    return name


def _key(kernel_filter: KernelFilter) -> str:
    """`kne=NAME` (the entire mangled name) for an exact mangled name, else `kns=NAME` (a substring of the
    kernel's name, which holds its function name)."""
    exact_mangled = kernel_filter.base == "mangled" and not kernel_filter.regex
    return f"{'kne' if exact_mangled else 'kns'}={filter_name(kernel_filter)}"


def filter_argv(kernel_filter: Optional[KernelFilter], exclude: Sequence[KernelFilter] = ()) -> list[str]:
    """nsightwrap's KernelFilter as `--kernel-name kns=NAME`, and each excluded one as
    `--kernel-name-exclude kns=NAME` (compute-sanitizer's key=value filters)."""
    argv = ["--kernel-name", _key(kernel_filter)] if kernel_filter is not None else []
    for e in exclude:
        argv += ["--kernel-name-exclude", _key(e)]
    return argv


def sanitizer_argv(sanitizer: str, command: Sequence[str], tool: str = "memcheck", *,
                   kernel_filter: Optional[KernelFilter] = None,
                   options: SanitizerOptions = SanitizerOptions()) -> list[str]:
    """The command line, built apart from running it (STYLE 3)."""
    if tool not in TOOLS:
        raise OptionsError(f"tool={tool!r}: compute-sanitizer's tools are {', '.join(TOOLS)}.")
    if not command:
        raise OptionsError("no program to run under compute-sanitizer: give its command line.")
    argv = [sanitizer, "--tool", tool]
    if options.print_limit is not None:
        argv += ["--print-limit", str(options.print_limit)]
    if options.error_exitcode is not None:
        argv += ["--error-exitcode", str(options.error_exitcode)]
    if options.launch_timeout is not None:
        argv += ["--launch-timeout", f"{options.launch_timeout:g}"]
    if tool == "racecheck" and options.racecheck_report:
        argv += ["--racecheck-report", options.racecheck_report]
    argv += filter_argv(kernel_filter, options.exclude)
    return argv + list(options.extra) + [str(c) for c in command]


class SanitizerListener:
    """No-op base: override what you want to hear (called from the thread that runs the tool)."""

    def started(self, argv: list[str], rule: WatchRule) -> None:
        """compute-sanitizer started with `argv`; `rule` says how long it may stay silent."""

    def finding(self, finding: Finding) -> None:
        """A finding, as soon as it is complete."""

    def finished(self, run: "SanitizerRun") -> None:
        """The run ended (whatever its status)."""


class SanitizerObserver:
    """The watch loop's observer (nsightwrap.watch.run.ObserverFactory): findings as events."""

    def __init__(self, tool: str, now: float):
        self.state = RunState(started_at=now, last_output_at=now)
        self.parser = FindingsParser(tool)

    def feed(self, text: str, now: float) -> list:
        return self.parser.feed(text)

    def close(self, now: float) -> list:
        return self.parser.close()

    def keep(self, event: Any) -> bool:
        return False  # the parser keeps every finding itself; the outcome need not hold them twice

    @property
    def summary(self) -> FindingsParser:
        """What the run's outcome carries (RunOutcome.summary): every finding, the summary lines."""
        return self.parser


@dataclass
class SanitizerRun:
    """One compute-sanitizer run: what it found and how it ended (STYLE 18)."""

    tool: str
    command: list[str]
    status: str
    findings_list: list[Finding]
    summary_counts: Summary
    returncode: Optional[int]
    elapsed_s: float
    reason: str = ""
    version: Optional[str] = None
    stall: Optional[dict] = None
    stop_steps: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    program_lines: int = 0
    #: The merged output (compute-sanitizer's and the program's), bounded as the watch loop keeps it.
    log: str = ""
    cookie: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def stalled(self) -> bool:
        return self.status == HANG

    @property
    def finished(self) -> bool:
        """compute-sanitizer reached its summary (it was not stopped)."""
        return self.summary_counts.complete and self.status not in (HANG, TIMEOUT, INTERRUPTED)

    @property
    def errors(self) -> int:
        """What the tool counted (all of it, beyond --print-limit), else the findings read."""
        counted = self.summary_counts.count
        return counted if counted is not None else len(self.findings_list)

    @property
    def hazards(self) -> Optional[int]:
        """racecheck's hazard count: the `[N hazards]` of its race reports, else its summary's errors + warnings
        (the hazard report counts each); None for the other tools."""
        if self.tool != "racecheck":
            return None
        counted = [f.hazards for f in self.findings_list if f.hazards is not None]
        return sum(counted) if counted else self.summary_counts.count

    @property
    def clean(self) -> bool:
        """It ran to its end and found nothing."""
        return self.finished and self.errors == 0 and not self.findings_list

    @property
    def findings(self) -> Any:
        """One row per finding (nsightwrap.diagnose.findings.COLUMNS)."""
        return findings_frame(self.findings_list)

    @property
    def summary(self) -> str:
        return summary_line(self)

    @property
    def headline(self) -> Optional[Finding]:
        """The finding a verdict names (the first of the most common kind), None without findings."""
        return headline(self.findings_list)

    @property
    def kernels(self) -> list[str]:
        """The kernels named by findings, by function name ("reduce_race"), most findings first."""
        names = [f.kernel.split("(")[0] for f in self.findings_list if f.kernel]
        return sorted(dict.fromkeys(names), key=lambda n: -names.count(n))

    def to_dict(self) -> dict[str, Any]:
        s = self.summary_counts
        return {"tool": self.tool, "status": self.status, "exit_code": self.exit_code, "summary": self.summary,
                "reason": self.reason, "command": self.command, "returncode": self.returncode,
                "elapsed_s": round(self.elapsed_s, 3), "stalled": self.stalled, "clean": self.clean,
                "errors": self.errors, "hazards": self.hazards, "version": self.version, "stall": self.stall,
                "counts": {"errors": s.errors, "hazards_displayed": s.hazards_displayed,
                           "hazard_errors": s.hazard_errors, "hazard_warnings": s.hazard_warnings,
                           "not_printed": s.not_printed, "program_error": s.program_error},
                "findings": [f.to_dict() for f in self.findings_list], "stop_steps": self.stop_steps,
                "survivors": self.survivors, "program_lines": self.program_lines,
                "log_tail": self.log[-4000:]}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def headline(findings: Sequence[Finding]) -> Optional[Finding]:
    """The finding a verdict names: the first of the most common kind, a CUDA error only when alone."""
    kinds = [f.kind for f in findings if not f.kind.startswith("CUDA error")] or [f.kind for f in findings]
    if not kinds:
        return None
    kind = max(dict.fromkeys(kinds), key=kinds.count)  # ties: the kind printed first
    return next(f for f in findings if f.kind == kind)


def _first(run: SanitizerRun) -> str:
    """The headline finding in words: "Race Read/Write in reduce_race (triage_kernels.cu:67)"."""
    f = headline(run.findings_list)
    kernel = (f.kernel or "").split("(")[0]
    return f.kind + (f" in {kernel}" if kernel else "") + (f" ({f.where})" if f.where else "")


def summary_line(run: SanitizerRun) -> str:
    """One line: "memcheck: 0 errors", "racecheck: 1 hazard displayed (65920 errors, 7936 warnings): ...",
    "memcheck: stalled after 30.2 s; 2 findings kept: ..."."""
    s, head = run.summary_counts, f"{run.tool}:"
    if run.status in (HANG, TIMEOUT, INTERRUPTED) or not s.complete:
        what = {HANG: "stalled", TIMEOUT: "timed out", INTERRUPTED: "interrupted"}.get(run.status, "ended early")
        kept = _plural(len(run.findings_list), "finding")
        text = f"{head} {what} after {run.elapsed_s:.1f} s, before its summary; {kept} kept"
    elif s.hazards_displayed is not None:
        text = (f"{head} {_plural(s.hazards_displayed, 'hazard')} displayed ({_plural(s.hazard_errors or 0, 'error')}, "
                f"{_plural(s.hazard_warnings or 0, 'warning')})")
    else:
        text = f"{head} {_plural(run.errors, 'error')}"
    if run.findings_list:
        text += f": {_first(run)}"
    elif run.status not in (OK, HANG, TIMEOUT, INTERRUPTED) and run.reason:
        text += f" ({run.reason})"
    return text


def _status(outcome: RunOutcome, summary: Summary, findings: list[Finding]) -> tuple[str, str]:
    """(status, why) of a finished or stopped run."""
    if outcome.verdict is not None:
        return outcome.verdict.status, outcome.verdict.reason
    if outcome.interrupted:
        return INTERRUPTED, "interrupted (Ctrl-C or a termination signal); the tree was stopped"
    if outcome.exception is not None:
        return ERROR, f"compute-sanitizer could not be started: {outcome.exception}"
    code = outcome.returncode
    if code is not None and code < 0:
        return CRASHED, f"compute-sanitizer was killed by signal {-code}"
    if not summary.complete:
        return ERROR, (f"compute-sanitizer exited with {code} without its summary: look at its output "
                       "(a tool that could not start, or a program it could not launch)")
    if (summary.count or 0) > 0 or findings:
        return ERROR, f"{_plural(summary.count or len(findings), 'error')} found"
    if code:
        return ERROR, f"no sanitizer error, but the program exited with {code}"
    return OK, ""


def _rules(tool: str, calibration: Optional[Calibration], kernel_filter: Optional[KernelFilter],
           options: SanitizerOptions, policy: SlowdownPolicy, limit_s: Optional[float], t0: float) -> WatchRule:
    pattern = filter_name(kernel_filter) if kernel_filter is not None else None
    kernel_s, basis = kernel_seconds(calibration, pattern)
    rule: WatchRule = SanitizerStall(tool, kernel_s, basis, hazard_report=options.hazard_report,
                                     policy=policy, started_at=t0, host_s=host_seconds(calibration))
    return rule | TotalTimeout(limit_s) if limit_s else rule


def run_sanitizer(command: Sequence[str], tool: str = "memcheck", *, kernel_filter: Optional[KernelFilter] = None,
                  calibration: Optional[Calibration] = None, limit_s: Optional[float] = None,
                  sanitizer: Optional[str] = None, listener: Optional[SanitizerListener] = None,
                  options: SanitizerOptions = SanitizerOptions(), env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, policy: SlowdownPolicy = DEFAULT_SLOWDOWN_POLICY,
                  stop: StopPolicy = StopPolicy(), clock: Callable[[], float] = time.monotonic,
                  on_output: Optional[Callable[[str], None]] = None, version: Optional[str] = None,
                  also: Optional[WatchRule] = None) -> SanitizerRun:
    """Run `command` under compute-sanitizer's `tool`, watched; see the module's docstring.

    kernel_filter: KernelFilter or its text ("exact:NAME", "regex:^NAME"); calibration: the program's
    kernel times without a tool (nsightwrap.calibrate), which the stall allowance scales; limit_s: a total
    time limit (None: only the stall rule); sanitizer: its path (else find_sanitizer); version: its
    version when already known (else asked once); also: another rule that may stop the run (e.g.
    watch.rules.Cancelled, for a run in a worker thread). Raises OptionsError / ToolNotFound before launching.
    """
    if isinstance(kernel_filter, str):
        kernel_filter = KernelFilter.from_user(kernel_filter, exact=not kernel_filter.startswith(REGEX_PREFIX))
    path = find_sanitizer(sanitizer, env)
    argv = sanitizer_argv(path, command, tool, kernel_filter=kernel_filter, options=options)
    version = version or sanitizer_version(path)
    listener = listener or SanitizerListener()
    rules = _rules(tool, calibration, kernel_filter, options, policy, limit_s, clock())
    rules = rules | also if also is not None else rules
    listener.started(argv, rules)
    outcome = watch(argv, rules, policy=stop, env=env, cwd=cwd, clock=clock, on_output=on_output,
                    on_event=listener.finding, frontend_names=FRONTEND_NAMES,
                    observer=lambda now: SanitizerObserver(tool, now))
    if outcome.exception is not None and not isinstance(outcome.exception, OSError):
        raise outcome.exception  # ours (a listener's, say), not the run's: the tree is already stopped
    return _result(tool, argv, outcome, rules, version, listener)


def _result(tool: str, argv: list[str], outcome: RunOutcome, rules: WatchRule, version: Optional[str],
            listener: SanitizerListener) -> SanitizerRun:
    parser: FindingsParser = outcome.summary
    stall = next(r for r in getattr(rules, "rules", (rules,)) if isinstance(r, SanitizerStall))
    status, reason = _status(outcome, parser.summary, parser.findings)
    stop = outcome.stop
    run = SanitizerRun(tool, argv, status, list(parser.findings), parser.summary, outcome.returncode,
                       outcome.elapsed_s, reason, version, stall.to_dict() if status == HANG else None,
                       list(stop.steps) if stop else [], list(stop.survivors) if stop else [],
                       parser.program_lines, outcome.log, outcome.cookie)
    listener.finished(run)
    return run

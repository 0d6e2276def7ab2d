"""`nsys profile` under the watchdog: the run, its rules, and what its output means.

    run = profile_nsys(["python", "train.py"], NsysOptions(output="runs/train"),
                       RunConfig(timeout=600))
    run.raise_for_status()                 # NsysFailed carries the run
    tables = nsys_stats(run.report)        # nsightwrap.reports.nsys: {"cuda_gpu_kern_sum": DataFrame, ...}

`profile_nsys` runs `nsys profile` through the same watch loop as ncu
(`watch.run.watch`): a new session, a cookie in every process's
environment, and the whole tree stopped whatever happens. nsys prints no
per-kernel progress, so there is no stall rule; a total timeout
(RunConfig.timeout) and an optional silence rule stop it. nsys exits 0 on
several failures: `nsys.messages` lists what is read from its output instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from nsightwrap.errors import NsysFailed, NsysInterrupted, OptionsError, ToolError
from nsightwrap.nsys.locate import ENV_NSYS, bundled_with_ncu, find_nsys
from nsightwrap.nsys.messages import (
    APP_FAILED,
    ERROR_LINE,
    EXISTS,
    IMPORTER_FAILED,
    NO_SUCH_FILE,
    UNKNOWN_REPORT,
    lines_with,
)
from nsightwrap.nsys.options import (
    NSYS_DEFAULTS,
    NSYS_SUFFIX,
    QDSTRM_SUFFIX,
    NsysOptions,
    RunSettings,
    build_nsys_argv,
    nsys_stem,
    plan_nsys_report,
)
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import CRASHED, ERROR, EXIT_CODES, HANG, INTERRUPTED, OK
from nsightwrap.watch.notes import orphans_note, stop_notes
from nsightwrap.watch.rules import RunState, TotalTimeout, Verdict, WatchRule
from nsightwrap.watch.run import RunOutcome, watch
from nsightwrap.watch.tree import StopRecord

FRONTEND_NAMES = ("nsys",)

_LIBDW_HINT = (
    "nsys traced the program but its importer (QdstrmImporter) could not start, so it left the raw "
    "trace {qdstrm} instead of a .nsys-rep. The usual cause is a missing libdw.so.1 (check with "
    "`ldd <nsys dir>/../linux-desktop-glibc_2_11_3-x64/QdstrmImporter | grep 'not found'`): install "
    "libdw1 (elfutils; `apt-get install libdw1`), or point {env} at a full Nsight Systems "
    "(/opt/nvidia/nsight-systems/<version>/bin/nsys). The .qdstrm can be imported later with "
    "`QdstrmImporter -i FILE.qdstrm`."
)


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


def nsys_rules(config: RunSettings, silence_timeout: Optional[float] = None) -> Optional[WatchRule]:
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
    def exit_code(self) -> int:
        """The CLI's exit code for this status (nsightwrap.status.EXIT_CODES), as every result gives it."""
        return EXIT_CODES[self.status]

    @property
    def report_kind(self) -> Optional[str]:
        if self.report is None:
            return None
        return "qdstrm" if self.report.name.endswith(QDSTRM_SUFFIX) else "nsys-rep"

    def describe(self) -> str:
        where = f"; report: {self.report}" if self.report else "; no report"
        return mask_text(f"nsys {self.status}: {self.reason}{where}")

    def raise_for_status(self) -> "NsysRun":
        if not self.ok:
            raise NsysFailed(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON, secret values masked."""
        d = asdict(self)
        d["report"] = str(self.report) if self.report else None
        d["report_kind"] = self.report_kind
        d["exit_code"] = self.exit_code
        return mask_doc(d)


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
        stem = nsys_stem(expected)
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
    importer = lines_with(log, IMPORTER_FAILED)
    if importer or is_qdstrm:
        reason = _LIBDW_HINT.format(qdstrm=report if is_qdstrm else "(a .qdstrm)", env=ENV_NSYS)
        if bundled_with_ncu(nsys):
            reason += f" This nsys ({nsys}) is the copy bundled with Nsight Compute."
        return ERROR, reason, importer
    exists = lines_with(log, EXISTS)
    # nsys's refusal names --force-overwrite or leaves no report; a program's own "already exists" does neither.
    if exists and (report is None or any("force-overwrite" in s.lower() for s in exists)):
        # nsys 2025.3.1 (GPU machine) then profiles anyway, into a name of its own, and exits 0.
        elsewhere = [str(p) for p in generated_files(log) if report is None or p != report]
        moved = f"; nsys wrote the profile to {', '.join(elsewhere)} instead" if elsewhere else ""
        return ERROR, (f"nsys would not overwrite an existing file ({exists[0]}){moved}; nsightwrap picks a free "
                       "name, so another process wrote it meanwhile: run again, or give another output="), exists
    unknown = lines_with(log, UNKNOWN_REPORT)
    if unknown:
        return ERROR, (f"nsys did not know a report ({unknown[0]}); run `nsys stats --help-reports` for the "
                       "names this version offers"), unknown
    missing = lines_with(log, [NO_SUCH_FILE])
    errors = [s for s in log.splitlines() if ERROR_LINE.match(s)]
    if returncode is not None and returncode < 0:
        return CRASHED, f"nsys was killed by signal {-returncode} from outside nsightwrap" + kept, errors
    if returncode:
        app = APP_FAILED.findall(log)
        if app and report is not None:
            return CRASHED, f"the profiled program failed (exit code {app[-1]}); the report is kept", errors
        first = (errors or missing or [f"nsys exited with code {returncode}"])[0].strip()
        return ERROR, first + _what_to_do(first), errors + missing
    if report is None:
        first = (missing or errors or ["nsys exited 0 but wrote no report"])[0].strip()
        return ERROR, first + _what_to_do(first), missing + errors
    return OK, f"report written: {report}", missing + errors


def _what_to_do(line: str) -> str:
    if NO_SUCH_FILE.lower() in line.lower():
        return " (check that the program and every path given exist; the command is run from RunConfig.cwd)"
    if "wrote no report" in line:
        return " (was anything traced? check the log, the capture range, and that the program ran)"
    return " (see the log)"


def build_nsys_run(outcome: RunOutcome, *, command: Sequence[str], expected: Optional[Path], nsys: str,
                   notes: Sequence[str] = ()) -> NsysRun:
    """The record of one watched `nsys profile`, from its outcome and the report it was to write."""
    report = find_report(outcome.log, expected)
    status, reason, warnings = classify_nsys(
        outcome.log, outcome.returncode, report, verdict=outcome.verdict, interrupted=outcome.interrupted,
        exception=outcome.exception, nsys=nsys)
    notes = [*notes, *stop_notes(outcome, "nsys")]
    return NsysRun(status=status, reason=reason, command=tuple(command), argv=tuple(outcome.argv), report=report,
                   returncode=outcome.returncode, elapsed_s=outcome.elapsed_s, log=outcome.log, stop=outcome.stop,
                   cookie=outcome.cookie, nsys=nsys, notes=tuple(notes), warnings=(*warnings, *outcome.warnings))


def profile_nsys(
    command: Sequence[str],
    options: Optional[NsysOptions] = None,
    config: Optional[RunSettings] = None,
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
    tree is stopped. config (a RunConfig, or anything with RunSettings' fields; None: RunConfig()'s
    defaults) gives the total limit (config.timeout), the stop, env, cwd and report_dir; silence_timeout
    (seconds without any output) is off unless given.
    """
    options = options or NsysOptions()
    config = NSYS_DEFAULTS if config is None else config
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
    orphans = orphans_note()
    if orphans:
        notes.append(orphans)
    outcome = watch(argv, config.stoppable(rules if rules is not None else nsys_rules(config, silence_timeout)),
                    policy=config.stop, env=env, cwd=config.cwd, clock=clock, on_output=on_output,
                    frontend_names=FRONTEND_NAMES)
    run = build_nsys_run(outcome, command=command, expected=report, nsys=nsys, notes=notes)
    if outcome.stopped_by_interrupt:  # Ctrl-C here, or another thread's cancel (RunConfig.cancel)
        raise NsysInterrupted(run)
    if outcome.exception is not None:
        raise outcome.exception
    return run


def run_nsys_tool(argv: list[str], timeout: float, env: Optional[Mapping[str, str]]) -> RunOutcome:
    """A short nsys command (stats, export) under the watchdog: total timeout, whole tree stopped."""
    outcome = watch(argv, TotalTimeout(timeout), env=env, frontend_names=FRONTEND_NAMES)
    if outcome.interrupted:
        raise KeyboardInterrupt(f"`{' '.join(argv)}` was interrupted; its tree was stopped")
    if outcome.exception is not None:
        raise outcome.exception
    if outcome.verdict is not None:
        raise ToolError(f"`{' '.join(argv)}` did not finish within {timeout:g} s and was stopped "
                        f"(raise timeout=). Output so far:\n{outcome.log[-4000:]}")
    return outcome

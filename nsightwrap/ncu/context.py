"""One run context: which ncu, what it offers, which environment, how to run.

Found once at the top (a `run`, a ladder walk, a sweep, one profile(fn)
call) and handed to every attempt and probe, so a walk of six attempts
locates ncu once and probes it once, and every record says which ncu ran.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, Optional, TypeVar

from nsightwrap.errors import OptionsError
from nsightwrap.ncu.allowance import GIVEN, NOT_CALIBRATED, AllowancePolicy, Calibration, KernelAllowances
from nsightwrap.ncu.calltime import ReportedCallTime
from nsightwrap.ncu.catalog import NcuInfo, probe_ncu
from nsightwrap.ncu.listen import SILENT, RunListener
from nsightwrap.ncu.locate import find_ncu
from nsightwrap.ncu.progress import DEFAULT_GROWTH, DEFAULT_STALL_TIMEOUT, StallRule
from nsightwrap.watch.evidence import StallEvidence
from nsightwrap.watch.files import DEFAULT_REPORT_DIR
from nsightwrap.watch.gpu import GpuInfo, LastListing, gpus
from nsightwrap.watch.notes import orphans_note
from nsightwrap.watch.rules import DEFAULT_STUCK_TIMEOUT, Cancelled, ToolStuck, TotalTimeout, WatchRule
from nsightwrap.watch.tree import StopPolicy

__all__ = ["DEFAULT_CALIBRATION_LIMIT_S", "FindNcu", "ProbeNcu", "RunConfig", "RunContext"]

#: How long the stalled kernel may run without ncu when calibration confirms a stall (seconds): past it, the
#: program is taken to hang by itself (a program fault, never an ncu hang). Without a kernel tracer the
#: plain run is allowed this long after the point where the program reached the kernel under ncu. 50 s, so
#: that a program that hangs by itself is called within a minute of the stall (issue 19), start-up included
#: for most programs; a kernel that really runs longer alone needs --calibration-limit.
DEFAULT_CALIBRATION_LIMIT_S = 50.0

FindNcu = Callable[[Optional[str], Mapping[str, str]], str]
"""find_ncu's shape: (explicit path or None, environment) -> ncu path."""

ProbeNcu = Callable[..., NcuInfo]
"""probe_ncu's shape: (path, cache_dir, *, env=...) -> NcuInfo."""

T = TypeVar("T")


@dataclass(frozen=True)
class RunConfig:
    """How nsightwrap runs the profiler; one object passed down, no globals."""

    ncu: Optional[str] = None  # explicit ncu path; else NSIGHTWRAP_NCU, PATH, ...
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    stall_growth: float = DEFAULT_GROWTH
    timeout: Optional[float] = None  # total, for the whole run
    stop: StopPolicy = field(default_factory=StopPolicy)
    report_dir: str = DEFAULT_REPORT_DIR
    cache_dir: Optional[str] = None
    validate: bool = True  # check sets/sections against the installed ncu first
    check_gpu: bool = True  # look for foreign / leftover GPU processes with nvidia-smi
    env: Optional[Mapping[str, str]] = None
    cwd: Optional[str] = None
    #: A file in which the program reports the time of one call of its work
    #: (nsightwrap.ncu.calltime); once written, that time calibrates each kernel
    #: (Calibration.from_call), where it allows more than the rule without it.
    call_time_file: Optional[str] = None
    #: Read ncu's own output from `--log-file` (its own channel) and pass the
    #: program's output through unparsed; False parses the merged stdout
    #: (for an ncu that cannot log to a file).
    log_channel: bool = True
    #: True when stall_timeout was given by the user (--stall-timeout, stall_timeout=): it then wins
    #: everywhere, over calibrated allowances and over every ladder rung's own stall_timeout.
    stall_timeout_given: bool = False
    #: How long the program's kernels run without ncu (nsightwrap.calibrate, or
    #: Calibration.from_call for profile(fn)): each kernel then gets its own allowance.
    calibration: Optional[Calibration] = None
    allowance: AllowancePolicy = field(default_factory=AllowancePolicy)
    #: After the program has ended (ncu's last `Disconnected`), how long ncu may go on silent before it
    #: is called stuck and stopped (nsightwrap.watch.rules.ToolStuck; seconds); None: never.
    stuck_timeout: Optional[float] = DEFAULT_STUCK_TIMEOUT
    #: The calibration limit (--calibration-limit, calibration_limit=): how long the stalled kernel may run
    #: without ncu before the program is taken to hang by itself (see DEFAULT_CALIBRATION_LIMIT_S).
    calibration_limit: float = DEFAULT_CALIBRATION_LIMIT_S
    #: Keeps each run's ncu log and timestamped transcript, and what a stall looked like (nvidia-smi -q, host
    #: stacks) in a folder per run, for `hangs bundle` (nsightwrap.watch.evidence); None: nothing kept.
    evidence: Optional[StallEvidence] = None
    #: A threading.Event that stops this run's watched processes (the profiled run and its calibration runs) from
    #: another thread, as Ctrl-C does in the main one: a walk's lines, sweep --jobs. Set per run, never pickled.
    cancel: Optional[threading.Event] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.stuck_timeout is not None and not self.stuck_timeout > 0:
            raise ValueError("stuck timeout must be > 0 seconds (or None: never)")
        if not self.calibration_limit > 0:
            raise OptionsError(f"calibration_limit={self.calibration_limit!r}: give the seconds the stalled kernel may "
                               f"run without ncu, a number > 0 (default {DEFAULT_CALIBRATION_LIMIT_S:g})")

    def rules(self, options: Any = None) -> WatchRule:
        """The stall rule (with per-kernel allowances when calibrated) | the total timeout.

        options (ProfileOptions) say how many passes each kernel needs and the clock control.
        """
        allowances = None
        if not self.stall_timeout_given and self.calibration is not None and self.calibration.ok:
            allowances = KernelAllowances.for_options(self.calibration, options, self.allowance)
        rule: WatchRule = StallRule(self.stall_timeout, self.stall_growth, allowances=allowances,
                                    basis=GIVEN if self.stall_timeout_given else NOT_CALIBRATED)
        if self.call_time_file is not None and not self.stall_timeout_given:
            rule = ReportedCallTime(rule, self.call_time_file, options, self.allowance)
        if self.timeout is not None:
            rule = rule | TotalTimeout(self.timeout)
        return rule

    def watched(self, rule: WatchRule) -> WatchRule:
        """`rule` (the run's own rules) | ToolStuck | Cancelled: what the watch loop checks."""
        return self.stoppable(rule if self.stuck_timeout is None else rule | ToolStuck(self.stuck_timeout, "ncu"))

    def stoppable(self, rule: WatchRule) -> WatchRule:
        """`rule` | Cancelled(cancel) when another thread may stop the run (RunConfig.cancel)."""
        return rule if self.cancel is None else rule | Cancelled(self.cancel)

    def replace(self, **changes: Any) -> "RunConfig":
        return replace(self, **changes)


class _Once(Generic[T]):
    """A value computed on first use, once, shared by the contexts derived from one another."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()  # sweep --jobs asks from several threads
        self._done = False
        self._value: Optional[T] = None

    def get(self) -> T:
        with self._lock:
            if not self._done:
                self._value = self._compute()
                self._done = True
        return self._value  # type: ignore[return-value]

    def start(self) -> None:
        """Compute in the background now; get() waits for it (and, had it failed, computes again to raise)."""
        def compute() -> None:
            try:
                self.get()
            except Exception:  # get() in the caller's thread raises it properly
                pass

        threading.Thread(target=compute, name="nsightwrap-probe", daemon=True).start()


@dataclass(frozen=True)
class RunContext:
    """The ncu found once, its NcuInfo probed once (on first use), the
    environment and the RunConfig. Derive per-attempt variants with
    :meth:`replace`; they share the ncu and its probe."""

    config: RunConfig
    ncu: str
    env: Mapping[str, str]
    _info: _Once[NcuInfo] = field(repr=False, compare=False)
    _locate: FindNcu = field(repr=False, compare=False)
    _probe: ProbeNcu = field(repr=False, compare=False)
    #: Hears what each attempt does as it runs (the CLI's live progress); silent by default.
    listener: RunListener = field(default=SILENT, repr=False, compare=False)
    #: The GPU's listing after the last attempt, which the next attempt's foreign-process look reuses.
    gpu_listing: LastListing = field(default_factory=LastListing, repr=False, compare=False)
    #: Processes of an earlier, killed nsightwrap still alive (a scan of /proc): looked for once per context
    #: family, by its first attempt, and said by every attempt.
    _orphans: _Once[Optional[str]] = field(default_factory=lambda: _Once(orphans_note), repr=False, compare=False)
    #: This machine's GPUs (names, driver), asked of nvidia-smi once per context family.
    _gpus: _Once[Optional[list[GpuInfo]]] = field(default_factory=lambda: _Once(gpus), repr=False, compare=False)

    @classmethod
    def create(cls, config: Optional[RunConfig] = None, *, locate: Optional[FindNcu] = None,
               probe: Optional[ProbeNcu] = None) -> "RunContext":
        """Locate ncu now (ToolNotFound says where it looked); probe it later, once."""
        config = config or RunConfig()
        locate = locate or find_ncu
        probe = probe or probe_ncu
        env = dict(os.environ if config.env is None else config.env)
        return cls._build(config, locate(config.ncu, env), env, locate, probe)

    @classmethod
    def _build(cls, config: RunConfig, ncu: str, env: Mapping[str, str], locate: FindNcu,
               probe: ProbeNcu) -> "RunContext":
        cache = Path(config.cache_dir) if config.cache_dir else None
        return cls(config, ncu, env, _Once(lambda: probe(ncu, cache, env=env)), locate, probe)

    @property
    def gpus(self) -> Optional[list[GpuInfo]]:
        """This machine's GPUs as nvidia-smi lists them (None: it cannot), asked once and then shared."""
        return self._gpus.get()

    @property
    def orphans(self) -> Optional[str]:
        """The note on processes of an earlier, killed nsightwrap still alive (None: none), looked for once."""
        return self._orphans.get()

    @property
    def info(self) -> NcuInfo:
        """What this ncu offers, probed on first use and then shared."""
        return self._info.get()

    def prefetch(self) -> "RunContext":
        """Probe ncu in the background (three runs of ncu, 1.3 s on a fresh machine) while the caller
        goes on, e.g. loading pandas; `info` then waits for it."""
        self._info.start()
        return self

    def with_config(self, config: RunConfig) -> "RunContext":
        """This context run with another config: the same ncu and probe, unless
        the config names another ncu or cache; the environment follows config.env."""
        if (config.ncu, config.cache_dir) != (self.config.ncu, self.config.cache_dir):
            return RunContext.create(config, locate=self._locate, probe=self._probe).with_listener(self.listener)
        env = self.env if config.env is None or config.env is self.config.env else dict(config.env)
        return replace(self, config=config, env=env)

    def with_listener(self, listener: RunListener) -> "RunContext":
        """This context, telling `listener` what its attempts do."""
        return replace(self, listener=listener)

    def replace(self, **changes: Any) -> "RunContext":
        """with_config(config.replace(**changes)), e.g. a rung's stall timeout or a GPU's env."""
        return self.with_config(self.config.replace(**changes))

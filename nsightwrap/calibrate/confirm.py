"""Confirm before recording: a stall judged without calibration is not yet a hang.

A Calibrator belongs to one program (one `run`, walk or sweep). Its
calibration is looked up in the hang store, else measured once (the CUPTI
tracer, else nsys, else a plain run) and kept there. A traced run stops as
soon as the stalled kernel has finished without ncu; a later stall on a
kernel that such a calibration did not reach measures again, up to it. `run` makes one attempt with the calibrated
allowances when they are known; when a kernel stalls against an
uncalibrated allowance, it calibrates (once) and then:

- the silence already exceeds the kernel's calibrated allowance: the hang
  is confirmed, and its evidence says so;
- the kernel's own time explains the silence: it runs again with the right
  allowances, and that verdict stands;
- the program itself hangs or fails without ncu: that is the status
  (timeout, crashed) with `program_fault` naming the kernel that did not
  finish without ncu, never an ncu hang. The stalled kernel may run
  RunConfig.calibration_limit seconds without ncu (a plain run, which
  cannot see kernels: that long after the point where the program reached
  the kernel under ncu);
- the calibration is interrupted: the attempt is `interrupted`
  (ProfileInterrupted), nothing is recorded; a calibration run that cannot
  start is an `error` that says what to do.

Because no stall becomes a hang before calibration has its say, the first
attempt need not wait the whole uncalibrated allowance (10 s) to suspect a
kernel: it suspects after SUSPECT_AFTER_S, and calibration decides. A slow
kernel then costs one calibration (kept in the store) and a second run; a
real hang costs seconds. When calibration bounds nothing for the kernel, it
runs again with the patient rule rather than take the suspicion as a verdict.

An explicit stall timeout (--stall-timeout, stall_timeout=) wins over all
of this: its verdicts are taken as they are. Runs without a stall pay
nothing.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence, Union

from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.calibrate.measure import measure as default_measure
from nsightwrap.errors import ProfileInterrupted, StoreError
from nsightwrap.ncu.allowance import Allowance, Calibration, KernelAllowances
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.listen import SILENT, RunListener
from nsightwrap.ncu.names import same_kernel
from nsightwrap.status import CRASHED, ERROR, HANG, INTERRUPTED, TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment

__all__ = ["Calibrator", "DEFAULT_LIMIT_S", "SUSPECT_AFTER_S", "calibrated_allowance", "confirm_limit",
           "needs_confirmation", "program_fault"]

log = logging.getLogger("nsightwrap")

#: How long an up-front calibration (run --calibrate: no stall yet) may take when nothing else bounds it
#: (no --timeout): a program that runs longer without ncu is reported as hanging by itself (or too long to
#: calibrate). A stall's confirmation is bounded by the calibration limit instead (confirm_limit).
DEFAULT_LIMIT_S = 300.0

#: Silence after which an uncalibrated kernel is suspected and calibration is asked (seconds). Above
#: the longest silence between two progress marks of small kernels (0.7 s with --set full on the H200,
#: 1.1 s in FACTS.md), so ordinary kernels are not suspected; a kernel slower than this costs a
#: calibration (once, kept in the store) and a second run, never a false hang.
SUSPECT_AFTER_S = 3.0

AttemptFn = Callable[[RunContext], Attempt]
StoreSource = Union[HangStore, Callable[[], Optional[HangStore]], None]


def needs_confirmation(attempt: Attempt, config: RunConfig) -> bool:
    """A hang judged against an allowance that was neither calibrated nor given by the user, nor called by a
    known cause (nsightwrap.ncu.known)."""
    stall = attempt.stall
    return (attempt.status == HANG and stall is not None and not stall.calibrated and not stall.known_cause
            and not config.stall_timeout_given)


def calibrated_allowance(attempt: Attempt, calibration: Calibration, options: Any,
                         config: RunConfig) -> Optional[Allowance]:
    """The allowance the stalled kernel gets once calibrated, as the stall rule would judge it."""
    stall = attempt.stall
    if stall is None:
        return None
    allowances = KernelAllowances.for_options(calibration, options, config.allowance)
    seen = max((k.passes for k in attempt.kernels if k.replay == "kernel"), default=0)
    found = allowances.for_stall(stall.kernel, seen or None, stall.quiet_replay)
    if found is None:
        return None
    return replace(found, seconds=max(found.seconds, stall.pace_s))


def _partial(calibration: Optional[Calibration]) -> bool:
    """A calibration whose run stopped early (once the stalled kernel had finished): nothing bounds the
    kernels it did not reach (a full run's wall time bounds every kernel)."""
    return calibration is not None and calibration.ok and calibration.bound_s is None


def _stopped_before(calibration: Calibration, stalled: Optional[StalledKernel]) -> bool:
    """A partial calibration that says nothing of `stalled`: it is measured again, up to this kernel."""
    return stalled is not None and _partial(calibration) and calibration.kernel_time(stalled.name) is None


def stalled_launch(attempt: Attempt, options: Any = None) -> StalledKernel:
    """The stalled launch as a traced run can find it: its kernel, and which launch of that kernel it is in the
    program: as many as ncu profiled before it, where that maps onto the program's own order (one process, no
    launch skipped or chosen by ID, profiling from the start, every earlier launch kept in the attempt)."""
    stall = attempt.stall
    o = options
    chosen = o is not None and (bool(o.launch_skip) or bool(o.launch_skip_before_match) or o.kernel_id is not None
                                or o.profile_from_start is False)
    kept = attempt.n_kernels == len(attempt.kernels)
    if chosen or attempt.connected > 1 or not kept:
        return StalledKernel(stall.kernel)
    # Only the launches ncu finished before the stalled one: the stalled launch itself may finish while the run is
    # stopped (a loaded machine printed its 100% late), and a later one of the same kernel with it.
    earlier = [k for k in attempt.kernels if stall.kernel_id is None or k.kernel_id < stall.kernel_id]
    return StalledKernel(stall.kernel, sum(1 for k in earlier if k.name == stall.kernel))


def confirm_limit(attempt: Attempt, config: RunConfig) -> tuple[float, float]:
    """(seconds the confirming run of the program without ncu may take, seconds it took under ncu to reach the
    stalled kernel): the calibration limit after that point. Without ncu the program reaches the kernel no later
    than under ncu (ncu only slows it down), so a run that outlasts this did not finish the kernel within the
    limit, or ran on long after it (a plain run cannot tell which)."""
    stall = attempt.stall
    reached = max(0.0, stall.detected_at_s - stall.silent_s) if stall is not None else attempt.elapsed_s
    return reached + config.calibration_limit, reached


def _in_flight(unfinished: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f'"{k}" ({s:.1f} s)' for k, s in unfinished)


def program_fault(calibration: Calibration, stalled: str, calibration_limit: float, reached_s: float) -> str:
    """The evidence of a program fault: which kernel did not finish without ncu (Calibration.unfinished, from a
    kernel tracer), else the kernel ncu stalled on and that the program did not finish within the limit (a
    plain run, allowed the calibration limit after reached_s, when the program reached that kernel under ncu)."""
    unfinished = calibration.unfinished
    mine = [u for u in unfinished if same_kernel(u[0], stalled)]
    others = [u for u in unfinished if u not in mine]
    also = f"; also in flight: {_in_flight(others)}" if others else ""
    if calibration.status == CRASHED:
        where = (f"kernels in flight when it failed: {_in_flight(unfinished)}" if unfinished
                 else f'under ncu it stalled in "{stalled}"')
        return f"the program fails without ncu ({calibration.source}): {where}"
    if mine:
        kernel, ran = max(mine, key=lambda u: u[1])
        return (f'"{kernel}" did not finish without ncu: it had run {ran:.1f} s when stopped, past the calibration '
                f"limit of {calibration_limit:g} s ({calibration.source}){also}")
    limit = reached_s + calibration_limit
    if unfinished:
        return (f"the program did not finish without ncu within {limit:g} s (the calibration limit of "
                f'{calibration_limit:g} s after it reached "{stalled}", {calibration.source}); in flight when '
                f"stopped: {_in_flight(unfinished)}")
    return (f"the program did not finish without ncu within {limit:g} s: the calibration limit of "
            f'{calibration_limit:g} s after it reached "{stalled}" (where ncu stalled, {reached_s:.1f} s in), '
            f"{calibration.source}, which cannot see which kernel runs; it hangs by itself in or after "
            f'"{stalled}", or runs on longer than that (give a longer --calibration-limit / calibration_limit=)')


#: What to do about a calibration run that could not be started (said once, whatever the source said).
CANNOT_START_ADVICE = ("check that the program exists and is executable and that the working folder exists, then "
                       "run again; or give --stall-timeout SEC (stall_timeout=) to judge stalls without calibrating")


def cannot_start(error: OSError, command: Sequence[str]) -> Calibration:
    """A calibration run that could not be started: an error that says what to do, not a program fault."""
    return Calibration.failed(
        ERROR, f"the program could not be started without ncu, to calibrate it ({error.strerror or error}: "
               f"{error.filename or command[0]}): {CANNOT_START_ADVICE}", "plain run")


def _interrupted(attempt: Attempt) -> Attempt:
    """The attempt of a stall whose calibration was interrupted: interrupted (130), never a hang."""
    stalled = f' on "{attempt.stall.kernel}"' if attempt.stall is not None else ""
    return replace(attempt, status=INTERRUPTED, reason=(
        f"interrupted (Ctrl-C or a termination signal) while calibrating a stall{stalled}, before any verdict; "
        "the tree was stopped"), notes=attempt.notes + ("interrupted while calibrating",))


class Calibrator:
    """One program's calibration (stored, else measured once) and the confirm-before-record step.

    store: a HangStore, or a callable returning the one to use now (a sweep's
    worker threads each have their own); None keeps nothing. limit_s bounds
    the calibration run (else the run's --timeout, else a default). lazy:
    do not look in the store before a stall (a single `run` then pays
    nothing unless it stalls); walks and sweeps look first.
    """

    def __init__(self, command: Sequence[str], *, store: StoreSource = None, env: Optional[Environment] = None,
                 nsys: Optional[str] = None, use_nsys: bool = True, limit_s: Optional[float] = None,
                 say: Optional[Callable[[str], None]] = None, measure: Callable[..., Calibration] = default_measure,
                 lazy: bool = False):
        self.command = list(command)
        self._store_source = store
        self._env = env
        self.nsys, self.use_nsys, self.limit_s = nsys, use_nsys, limit_s
        self._say = say
        self._measure = measure
        self.lazy = lazy
        self._calibration: Optional[Calibration] = None
        self._looked_up = False
        self._lock = threading.RLock()
        self.measured = 0  # calibration runs made (0 or 1; more when one stopped before a later stalled kernel)

    # --- the calibration ---------------------------------------------------------
    def _store(self) -> Optional[HangStore]:
        source = self._store_source
        if source is None or isinstance(source, HangStore):
            return source
        try:
            return source()
        except StoreError as e:
            self._tell(f"the hang store cannot be used ({e}); the calibration is not kept")
            self._store_source = None
            return None

    def use_environment(self, env: Environment) -> None:
        """Use `env` for the store, unless this Calibrator was given one or has detected its own
        (a walk or sweep that detected the job's environment hands it over, so it is detected once)."""
        with self._lock:
            if self._env is None:
                self._env = env

    def _environment(self) -> Environment:
        if self._env is None:
            self._env = Environment.detect()
        return self._env

    def known(self) -> Optional[Calibration]:
        """The calibration at hand: measured in this run, else the stored one (looked up once)."""
        with self._lock:
            if self._calibration is None and not self._looked_up:
                self._looked_up = True
                store = self._store()
                if store is not None:
                    self._calibration = store.calibration_for(self.command, self._environment())
            return self._calibration

    def _kept_meanwhile(self, stalled: Optional[StalledKernel]) -> Optional[Calibration]:
        """A usable calibration that another run of the same program kept in the store after this Calibrator
        looked there (an engine's jobs run beside each other: a sweep's next whole-program run may start before
        the last one's calibration is kept), when it reaches `stalled`; else None. Asked only at a stall."""
        store = self._store()
        if store is None:
            return None
        try:
            found = store.calibration_for(self.command, self._environment())
        except StoreError:
            return None
        if found is None or not found.ok or found == self._calibration or _stopped_before(found, stalled):
            return None
        return found

    def learn(self, calibration: Optional[Calibration]) -> bool:
        """A calibration measured elsewhere (an engine's job, on its node, already kept in the store there) taken
        as this Calibrator's own, as if it had measured it: later attempts and the walk's decisions (a program
        that marks no range) see it. Only a usable one (ok), and never over a usable one that bounds every
        kernel (a full run's). True when it was taken."""
        if calibration is None or not calibration.ok:
            return False
        with self._lock:
            current = self._calibration
            if (current is not None and current.ok and not _partial(current)) or current == calibration:
                return False
            self._calibration, self._looked_up = calibration, True
            return True

    def calibrate(self, config: RunConfig, limit_s: Optional[float] = None, *,
                  stalled: Optional[StalledKernel] = None, listener: RunListener = SILENT) -> Calibration:
        """known(), else measured now (once per Calibrator) and kept in the store when it worked.

        limit_s bounds the run (a stall's confirm_limit); without it, this Calibrator's limit_s, else the
        run's timeout, else DEFAULT_LIMIT_S. A run that cannot start gives a failed (error) Calibration.
        stalled: the kernel it is for (the traced run stops once that kernel has finished without ncu, or
        once it has run config.calibration_limit there)."""
        with self._lock:
            looked_before = self._looked_up  # else known() looks now: no need to look again below
            found = self.known()
            if found is not None and not _stopped_before(found, stalled):
                return found
            found = self._kept_meanwhile(stalled) if looked_before else None
            if found is not None:
                self._calibration = found
                self._tell(f"{found.describe()} (kept in the store meanwhile by another run of this program)")
                return found
            limit = self.limit_s or limit_s or config.timeout or DEFAULT_LIMIT_S
            nsys = "nsys, else " if self.use_nsys else ""
            self._tell(f"timing the program without ncu (the CUPTI tracer, else {nsys}a plain run; at most "
                       f"{limit:g} s) so that each kernel gets its own stall allowance")
            try:
                found = self._measure(self.command, config, limit_s=limit, nsys=self.nsys, use_nsys=self.use_nsys,
                                      stalled=stalled, kernel_limit_s=config.calibration_limit, listener=listener)
            except OSError as e:  # no such program, no permission, no such working folder
                found = cannot_start(e, self.command)
            self.measured += 1
            self._calibration = found
            self._tell(found.describe())
            store = self._store() if found.ok else None
            if store is not None:
                store.record_calibration(found, self.command, self._environment())
            return found

    def apply(self, context: RunContext) -> RunContext:
        """The context with the known calibration (a caller's own, e.g. profile(fn)'s, is kept)."""
        config = context.config
        if config.stall_timeout_given or config.calibration is not None:
            return context
        found = self._calibration if self.lazy else self.known()
        return context if found is None or not found.ok else context.replace(calibration=found)

    # --- confirm before recording ------------------------------------------------
    def run(self, attempt_fn: AttemptFn, context: RunContext, options: Any = None) -> Attempt:
        """One attempt (calibrated when the calibration is known), confirmed before it is taken as a hang."""
        return self.confirm(attempt_fn(self._suspicious(self.apply(context))), attempt_fn, context, options)

    @staticmethod
    def _suspicious(context: RunContext) -> RunContext:
        """The first attempt's context: uncalibrated kernels are suspected early (see the module docstring).

        Not when the user gave the stall timeout, nor when the program reports its own call time
        (profile(fn): that allowance already comes from a measurement).
        """
        config = context.config
        if config.stall_timeout_given or config.call_time_file is not None:
            return context
        return context.replace(stall_timeout=min(config.stall_timeout, SUSPECT_AFTER_S))

    def confirm(self, attempt: Attempt, attempt_fn: AttemptFn, context: RunContext, options: Any = None) -> Attempt:
        """The attempt's verdict once its stalled kernel is calibrated (see the module docstring)."""
        config = context.config
        if not needs_confirmation(attempt, config):
            return attempt
        stall = attempt.stall
        if attempt.gpu_left_after:  # FACTS: a target left spinning makes plain runs hang too
            return replace(attempt, notes=attempt.notes + (
                "not calibrated: the GPU still runs processes of this run, so a plain run would hang too",))
        self._tell(f'"{stall.kernel}" stalled ({stall.evidence()}): not a hang until calibrated')
        limit, reached = confirm_limit(attempt, config)
        try:
            given = config.calibration
            listener = getattr(context, "listener", SILENT)  # what the live line hears (a context without one: none)
            calibration = given if given is not None and given is not self._calibration else self.calibrate(
                config, limit, stalled=stalled_launch(attempt, options), listener=listener)
        except KeyboardInterrupt:  # the calibration's tree is stopped; callers handle this like any Ctrl-C
            raise ProfileInterrupted(_interrupted(attempt)) from None
        if not calibration.ok:
            return self._failed(attempt, calibration, config.calibration_limit, reached)
        allowance = calibrated_allowance(attempt, calibration, options, config)
        if allowance is None:  # nothing bounds this kernel: the patient uncalibrated rule decides
            if stall.allowance_s < config.stall_timeout:  # it was only suspected: judge it patiently
                self._tell(f'"{stall.kernel}": calibration does not bound it; running again with the '
                           f"uncalibrated allowance of {config.stall_timeout:g} s")
                again = attempt_fn(context.replace(calibration=calibration))
                return replace(again, calibration=again.calibration or calibration)
            return replace(attempt, calibration=calibration)
        if stall.silent_s >= allowance.seconds:
            return self._confirmed(attempt, calibration, allowance)
        self._tell(f'"{stall.kernel}" is explained by its own time ({allowance.basis}): running again with '
                   f"an allowance of {allowance.seconds:.1f} s")
        again = self._again(attempt_fn, context.replace(calibration=calibration), options)
        first = (f'a first run stalled on "{stall.kernel}" ({stall.evidence()}); calibrated, its allowance is '
                 f"{allowance.seconds:.1f} s {allowance.basis}, so it ran again")
        return replace(again, notes=again.notes + (first,))

    def _again(self, attempt_fn: AttemptFn, context: RunContext, options: Any) -> Attempt:
        """The rerun with the calibration. When that calibration stopped early (after the kernel that
        stalled first), a later kernel it did not reach is suspected early and confirmed in turn (its
        calibration runs up to that kernel), rather than judged by the patient rule without its time."""
        calibration = context.config.calibration
        if not _partial(calibration):  # a full run: every kernel is bounded
            return attempt_fn(context)
        again = attempt_fn(self._suspicious(context))
        stall = again.stall
        if needs_confirmation(again, context.config) and _stopped_before(calibration, StalledKernel(stall.kernel)):
            return self.confirm(again, attempt_fn, context, options)
        return again

    def _failed(self, attempt: Attempt, calibration: Calibration, calibration_limit: float,
                reached: float) -> Attempt:
        """The program hangs or fails by itself (timeout, crashed: a program fault), or could not be run
        without ncu (error): never a hang."""
        stall = attempt.stall
        notes = attempt.notes + (f"under ncu: {stall.message()}",)
        if calibration.status not in (TIMEOUT, CRASHED):
            advice = "" if CANNOT_START_ADVICE in calibration.reason else f": {CANNOT_START_ADVICE}"
            return replace(attempt, status=ERROR, reason=calibration.reason + advice, calibration=calibration,
                           notes=notes)
        fault = program_fault(calibration, stall.kernel, calibration_limit, reached)
        self._tell(f"program fault: {fault}")
        return replace(attempt, status=calibration.status, calibration=calibration, program_fault=fault,
                       reason=f"program fault, not an ncu hang: {fault}", notes=notes + (calibration.reason,))

    def _confirmed(self, attempt: Attempt, calibration: Calibration, allowance: Allowance) -> Attempt:
        stall = replace(attempt.stall, allowance_s=allowance.seconds, basis=allowance.basis, calibrated=True)
        note = f"hang confirmed by calibration: {stall.evidence()}"
        self._tell(note)
        return replace(attempt, stall=stall, reason=stall.message(), calibration=calibration,
                       notes=attempt.notes + (note,))

    def _tell(self, text: str) -> None:
        log.info(text)
        if self._say is not None:
            self._say(f"[nsightwrap] {text}\n")

"""One session per profiled program: what every attempt shares, and one attempt.

A session is made once at each front door (`run`, `run --profile`,
`sweep-sections`, one `Profiler.profile` call) and handed to the walk or
the sweep, which keep only their own policy (the walk its ladder, the
sweep its group testing). It holds the program's command; ncu, found and
probed once, with the run's environment and progress listener (the
RunContext); the hang store; this machine as the store knows it (asked
once); the calibrator; the job's shape, learnt as attempts show it; and
the stall-timeout choice, in one encoding: RunConfig.stall_timeout_given
(with RunConfig.stall_timeout), set by `Session.open(stall_timeout=...)`.

`Session.attempt` is the one attempt of a walk or a sweep: calibrated,
confirmed before a stall is taken as a hang, retried after a pause when
ncu's error is transient, recorded in the store, and stopped (GpuKept)
when the GPU keeps processes of it. The store's answers for this program
and machine are asked through the session.

Worker threads (sweep --jobs) may share a session: SQLite connections stay
in their thread, so each worker opens its own store on first use, with the
main store's settings; Session.close() closes them (the main store is the
caller's).

A session may name a cluster engine (`executor`, an ExecutorSpec): a walk then runs its independent jobs as
jobs of that engine (nsightwrap.fallback.executor), each attempt recorded on the node as `Session.record`
records it here. Without one, a walk of a torchrun job runs its collectives' job beside the main program's
(`side_by_side`, nsightwrap.fallback.sidebyside), in a thread of its own.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.errors import NsightwrapError, ProfileInterrupted
from nsightwrap.fallback.collectives import JobShape
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import ERROR, INTERRUPTED
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey
from nsightwrap.store.schema import Record
from nsightwrap.watch.locate import check_program

__all__ = ["GpuKept", "Session", "Tag", "TRANSIENT_ERRORS", "is_transient"]

#: ncu errors worth another try after a pause: someone else held the GPU's
#: performance monitor (DCGM, another profiler) or its lock for a moment.
TRANSIENT_ERRORS = (
    re.compile(r"Failed to prepare kernel for profiling", re.I),
    re.compile(r"nsight-compute-lock|profiling lock|lock is held", re.I),
    re.compile(r"resource (is )?(temporarily )?unavailable|device or resource busy", re.I),
)


def is_transient(attempt: Attempt) -> bool:
    return attempt.status == ERROR and any(p.search(e) for e in attempt.errors for p in TRANSIENT_ERRORS)


class GpuKept(NsightwrapError):
    """The GPU still runs processes of the last attempt (recorded all the same): a target left spinning makes
    every later run on that GPU hang (FACTS.md), so what would follow is false; the walk or sweep stops."""

    def __init__(self, attempt: Attempt) -> None:
        super().__init__("the GPU still runs processes of the last attempt (" + ", ".join(attempt.gpu_left_after)
                         + "): stopped so as not to record false hangs; free the GPU and run again")
        self.attempt = attempt


@dataclass(frozen=True)
class Tag:
    """How an attempt is recorded: the kernel it was tried for (None: the program), the rung, the ladder."""

    kernel: Optional[str] = None
    rung: Optional[str] = None
    ladder: Optional[str] = None


class Session:
    """One profiled program: its command, ncu (context), store, environment, calibrator and job shape."""

    def __init__(self, command: Sequence[str], context: RunContext, *, store: Optional[HangStore] = None,
                 calibrator: Optional[Calibrator] = None, environment: Optional[Environment] = None,
                 on_output: Optional[Callable[[str], None]] = None, rank: int = 0,
                 retry_wait: tuple[float, float] = (1.0, 8.0), executor: Optional[ExecutorSpec] = None,
                 side_by_side: bool = True) -> None:
        self.command = list(command)
        self.executor = executor  # where a walk's attempts run (nsightwrap.fallback.executor); None: here, in turn
        #: Here (no executor): a torchrun job's collectives, profiled on one rank, run beside the main program's
        #: run on the same GPUs (nsightwrap.fallback.sidebyside); False: one run at a time.
        self.side_by_side = side_by_side
        self.context, self.store, self.on_output = context, store, on_output
        self.rank, self.retry_wait = rank, retry_wait
        self.shape = JobShape.of(self.command)
        self._given_env = environment  # the caller's, used when the job's size matches
        self._env: Optional[Environment] = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self._owner = threading.get_ident()
        self._thread_stores: list[HangStore] = []  # the workers' own connections, closed by close()
        self.calibrator = calibrator or Calibrator(self.command, store=self.thread_store if store is not None else None)

    @classmethod
    def open(cls, command: Sequence[str], run: "RunConfig | RunContext | None" = None, *,
             stall_timeout: Optional[float] = None, **parts: Any) -> "Session":
        """A session for `command`: `run` is a RunContext already made (ncu found, maybe probed) or a RunConfig
        to make one from (default: RunConfig()). stall_timeout: an explicit stall timeout (seconds), which wins
        at every rung over calibrated allowances and the rungs' own (else the config's choice stands). parts:
        Session's keyword arguments (store, calibrator, environment, on_output, rank, retry_wait, executor: the
        cluster engine a walk's independent jobs run on, nsightwrap.fallback.spec.ExecutorSpec; side_by_side:
        False runs a torchrun job's collectives after its main program, not beside it)."""
        context = run if isinstance(run, RunContext) else RunContext.create(run)
        if stall_timeout is not None:
            context = context.replace(stall_timeout=stall_timeout, stall_timeout_given=True)
        check_program(command, context.env, context.config.cwd)  # before the probe of ncu and the first launch
        return cls(command, context, **parts)

    @property
    def config(self) -> RunConfig:
        return self.context.config

    @property
    def stall_timeout(self) -> Optional[float]:
        """The explicit stall timeout (seconds), or None when each kernel's allowance decides."""
        return self.config.stall_timeout if self.config.stall_timeout_given else None

    # --- what is asked once --------------------------------------------------------
    @property
    def environment(self) -> Optional[Environment]:
        """This machine and the job's size as the store records them (None without a store); asked once,
        and again only when the job turns out larger than its command said."""
        if self.store is None:
            return None
        with self._lock:
            if self._env is None:
                self._env = self.shape.environment(self.context, self._given_env)
                self.calibrator.use_environment(self._env)  # a calibrator need not ask nvidia-smi again
            return self._env

    def thread_store(self) -> HangStore:
        """The store, opened again in a worker thread (an SQLite connection stays in its thread)."""
        assert self.store is not None
        if threading.get_ident() == self._owner:
            return self.store
        if getattr(self._local, "store", None) is None:
            store = self.store.another()  # the main store's settings: busy_timeout, readonly, user, clock
            with self._lock:
                self._thread_stores.append(store)
            self._local.store = store
        return self._local.store

    def close(self) -> None:
        """The stores the worker threads opened, closed (a database connection each); the session's own store
        stays open: it is the caller's. A later thread_store() opens a new one."""
        with self._lock:
            stores, self._thread_stores = self._thread_stores, []
            self._local = threading.local()
        for store in stores:
            store.close()

    def learn(self, attempt: Attempt) -> bool:
        """A program that no launcher announced may still run several processes: ncu's output says so.
        True when the shape changed (the environment follows it)."""
        with self._lock:
            shape = self.shape.seen(attempt.connected)
            if shape == self.shape:
                return False
            self.shape = shape
            if self._env is not None:
                self._env = shape.environment(self.context, self._given_env)
            return True

    # --- one attempt ---------------------------------------------------------------
    def context_for(self, stall_timeout: Optional[float] = None, gpu: Optional[str] = None) -> RunContext:
        """The context of one attempt: `stall_timeout` (a rung's own) for kernels not calibrated, unless an
        explicit one was given; `gpu`: the CUDA_VISIBLE_DEVICES of a probe run beside others."""
        context = self.context
        if stall_timeout and not self.config.stall_timeout_given:
            context = context.replace(stall_timeout=stall_timeout)
        if gpu is not None:  # one probe per GPU, never two on one
            context = context.replace(env={**context.env, "CUDA_VISIBLE_DEVICES": gpu})
        return context

    def run(self, options: ProfileOptions, context: Optional[RunContext] = None, *, what: str = "the attempt",
            cancel: Optional[threading.Event] = None, tries: int = 3) -> Attempt:
        """One watched run, calibrated and confirmed, tried up to `tries` times, after a pause, while ncu's error
        is transient; not recorded. cancel: an event that stops it from another thread. ProfileInterrupted when
        it was stopped (Ctrl-C, a termination signal, `cancel`)."""
        listener = (context or self.context).listener
        retrying = Retrying(retry=retry_if_result(is_transient), stop=stop_after_attempt(tries),
                            wait=wait_exponential(min=self.retry_wait[0], max=self.retry_wait[1]), reraise=True,
                            retry_error_callback=lambda state: state.outcome.result(),
                            before_sleep=lambda state: listener.stage(
                                f"ncu's error looks transient: retrying {what} in {state.next_action.sleep:.0f} s"))

        def once(ctx: RunContext) -> Attempt:
            return retrying(profile_command, self.command, options, ctx, on_output=self.on_output)

        _ = self.environment  # asked once, and handed to the calibrator before it looks in the store
        context = context or self.context
        if cancel is not None:  # stops the profiled runs and the calibration's (RunConfig.cancel)
            context = context.replace(cancel=cancel)
        attempt = self.calibrator.run(once, context, options)
        if attempt.status != INTERRUPTED and cancel is not None and cancel.is_set():  # cancelled as it ended
            attempt = replace(attempt, status=INTERRUPTED, reason="interrupted (Ctrl-C or a termination signal) as "
                              f"it ended ({attempt.status}: {attempt.reason}); not taken")
        if attempt.status == INTERRUPTED:
            raise ProfileInterrupted(attempt)
        return attempt

    def attempt(self, options: ProfileOptions, tag: Tag = Tag(), context: Optional[RunContext] = None,
                cancel: Optional[threading.Event] = None) -> Attempt:
        """One attempt of a walk or sweep: run (see `run`), the job's shape learnt from it, recorded in the
        store; GpuKept (after recording) when the GPU keeps processes of it."""
        attempt = self.run(options, context, what=self.what(tag), cancel=cancel)
        return self.keep(attempt, options, tag)

    @staticmethod
    def what(tag: Tag) -> str:
        """How the live line names an attempt of `tag`."""
        return f"rung {tag.rung!r}" if tag.rung else "the probe"

    def keep(self, attempt: Attempt, options: ProfileOptions, tag: Tag) -> Attempt:
        """A run (see `run`) taken as an attempt: the job's shape learnt from it, recorded in the store; GpuKept
        (after recording) when the GPU keeps processes of it."""
        self.learn(attempt)
        self.record(attempt, options, tag)
        if attempt.gpu_left_after:
            raise GpuKept(attempt)
        return attempt

    def record(self, attempt: Attempt, options: ProfileOptions, tag: Tag) -> list[Record]:
        if self.store is None:
            return []
        env = self.environment
        with self._lock:
            return self.thread_store().record_attempt(attempt, ProfileKey.from_options(options), env,
                                                      kernel=tag.kernel, rung=tag.rung, ladder=tag.ladder)

    # --- what the store knows --------------------------------------------------------
    def hanging_kernels(self, options: ProfileOptions) -> list[str]:
        """Kernels of this program the store knows to hang with these options here."""
        if self.store is None:
            return []
        return self.thread_store().hanging_kernels(ProfileKey.from_options(options), self.environment, self.command)

    def hangs_for(self, kernel: str, options: ProfileOptions) -> bool:
        return self.store is not None and bool(
            self.thread_store().hangs_for(kernel, ProfileKey.from_options(options), self.environment))

    def profiled_nothing(self, kernel: str, options: ProfileOptions, program: Sequence[str]) -> bool:
        return self.store is not None and bool(self.thread_store().profiled_nothing(
            kernel, ProfileKey.from_options(options), self.environment, list(program)))

    def verdict(self, kernel: str, options: ProfileOptions) -> Any:
        """The newest verdict the store holds for this kernel with these options here, if any."""
        if self.store is None:
            return None
        return self.thread_store().newest_verdict(kernel, ProfileKey.from_options(options), self.environment)


#: The ladder name a sweep's probes are recorded under.
SWEEP = "sweep-sections"

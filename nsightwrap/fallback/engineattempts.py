"""A Session's attempts as jobs of the probe engine (nsightwrap.fallback.executor): the sweep's probes and the
walk's attempts on the local GPUs or on Slurm."""

from __future__ import annotations

from typing import Any, Callable, Optional

from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.probejob import ProbeTask, store_setting_of
from nsightwrap.fallback.session import SWEEP, Session, Tag
from nsightwrap.fallback.spec import LOCAL
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import INTERRUPTED

__all__ = ["EngineAttempts"]


class EngineAttempts:
    """Session.attempt as jobs of an engine (the sweep's probes, the walk's attempts): the task made here (the
    calibration known here travels with it), run and recorded on the node by run_probe under the same Tag as
    Session.attempt records; the job's shape learnt here. A GPU that keeps processes is the engine's to set
    aside (the attempt runs again elsewhere), never a GpuKept."""

    def __init__(self, session: Session, engine: ProbeEngine) -> None:
        self.session, self.engine = session, engine
        self.store = engine.keep_store(store_setting_of(session.store)) if session.store is not None else None

    def task(self, options: ProfileOptions, tag: Tag, context: Optional[RunContext] = None) -> ProbeTask:
        session, calibrator = self.session, self.session.calibrator
        environment = session.environment  # asked once, and handed to the calibrator before it looks
        config = calibrator.apply(context or session.context).config
        local = self.engine.spec.kind == LOCAL  # this machine: the node need not ask nvidia-smi again
        return ProbeTask(tuple(session.command), options, config, self.store, session.shape, nsys=calibrator.nsys,
                         ladder=tag.ladder or SWEEP, sweep=self.engine.token,
                         environment=environment if local else None, kernel=tag.kernel, rung=tag.rung)

    def attempt(self, options: ProfileOptions, tag: Tag, context: Optional[RunContext] = None,
                chain: str = "", queued: Optional[Callable[[], None]] = None,
                on_suspect: Optional[Callable[[str], None]] = None) -> tuple[Any, Optional[str]]:
        """(the attempt, where it ran: the GPU, or host:GPU on Slurm); ProfileInterrupted when it was stopped.
        on_suspect: told each kernel the job suspects while it runs (ProbeEngine.run)."""
        reply = self.engine.run(self.task(options, tag, context), chain, queued, on_suspect)
        attempt = reply["attempt"]
        if attempt.status == INTERRUPTED:
            raise ProfileInterrupted(attempt)
        self.session.learn(attempt)
        self.session.calibrator.learn(attempt.calibration)  # measured on the node: the walk's decisions need it
        where = reply["gpu"] if self.engine.spec.kind == LOCAL else f"{reply['host']}:{reply['gpu'] or '-'}"
        return attempt, where

    def speculate(self, options: ProfileOptions, tag: Tag, chain: str = "") -> bool:
        """The attempt started ahead of its chain's asking, where a GPU is idle (ProbeEngine.speculate)."""
        return self.engine.speculate(self.task(options, tag), chain)

"""Hangs of a known cause: called at once, with that cause as their evidence, no calibration.

Measured on 2x H100 with ncu 2025.3.1 (FACTS.md, "Multi-process programs"):
when every rank of a multi-process job is profiled, ncu serialises kernel
launches across the processes, so a collective (NCCL `ncclDevKernel_*`,
NVSHMEM) whose other half runs in another profiled rank never starts: it
stops at `0%..` for good, in every mode and whatever is collected. Waiting
for a calibrated allowance there only costs time (82 s in the first attempt
of a walk on the GPU machine). CollectiveRule calls such a stall after a
short fixed grace instead; its Stall says the cause and counts as trusted
(never confirmed by calibrating, recorded as a hang of that cause).

The rule is pure (time injected), like nsightwrap.ncu.progress.StallRule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nsightwrap.ncu.allowance import KNOWN_CAUSE, KNOWN_CAUSE_S
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.names import function_core
from nsightwrap.ncu.progress import FIRST_BURST_S, Stall, WatchState
from nsightwrap.status import HANG
from nsightwrap.watch.launchers import parse_launch
from nsightwrap.watch.rules import Verdict, WatchRule

__all__ = ["COLLECTIVES_SERIALISED", "COLLECTIVE_PREFIXES", "CollectiveRule",
           "collective_family", "known_cause_rule", "run_rules"]

#: Kernel families that are collectives: every rank's kernel waits for the others' (NCCL, NVSHMEM).
COLLECTIVE_PREFIXES = ("nccl", "nvshmem")
#: Silence after a collective's last mark (its `0%..` burst) before the known cause is called
#: (RunConfig.allowance.known_cause_s).
#: The evidence of such a hang (its Stall.basis).
COLLECTIVES_SERIALISED = (f"{KNOWN_CAUSE}: ncu serialises kernel launches across the processes it profiles, so a "
                          "collective waits for its other half forever (FACTS.md)")


def collective_family(kernel: Optional[str]) -> Optional[str]:
    """The collective family (prefix) of a kernel name in any spelling (`function`, `demangled`, cut short),
    or None for other kernels."""
    core = function_core(kernel) if kernel else ""
    return next((p for p in COLLECTIVE_PREFIXES if core.startswith(p)), None)


@dataclass(frozen=True)
class CollectiveRule(WatchRule):
    """A collective that stalls while every rank of a multi-process job is profiled is hung, by a known cause.

    The job is multi-process when its launcher says so (`ranks` > 1: torchrun
    --nproc-per-node, mpirun -np, srun -n) or when ncu is connected to
    several processes at once. Only for runs where ncu wraps every rank: a
    one-rank wrapping (--rank) lets single-pass collections of a collective
    finish, so it gets no such rule.
    """

    grace_s: float = KNOWN_CAUSE_S
    ranks: Optional[int] = None  # the job's processes as its launcher says (None: not said)

    def __post_init__(self) -> None:
        if not self.grace_s > 0:
            raise ValueError("the known cause's grace must be > 0 seconds")

    def applies(self, state: WatchState) -> bool:
        cur = state.current
        return (cur is not None and collective_family(cur.name) is not None
                and ((self.ranks or 0) > 1 or state.most_connected > 1))

    def allowance(self, state: WatchState) -> Optional[float]:
        """The current kernel's allowance (the grace) when this rule judges it, else None (the live line)."""
        return self.grace_s if self.applies(state) else None

    def deadline(self, state: WatchState) -> float:  # type: ignore[override]
        return state.current.last_mark_at + self.grace_s if self.applies(state) else float("inf")

    def __call__(self, state: WatchState, now: float) -> Optional[Verdict]:  # type: ignore[override]
        if not self.applies(state):
            return None
        cur = state.current
        silent = now - cur.last_mark_at
        if silent < self.grace_s:
            return None
        before = cur.replay_pass is None and cur.last_mark_at - cur.started_at <= FIRST_BURST_S
        stall = Stall(kernel=cur.name, kernel_id=cur.kernel_id, where=cur.where(), silent_s=silent,
                      allowance_s=self.grace_s, detected_at_s=now - state.started_at, before_first_progress=before,
                      slow_warning_seen=state.last_slow_warning_at >= cur.started_at,
                      basis=COLLECTIVES_SERIALISED, known_cause=True,
                      first_pass=before or cur.replay_pass == 1)
        return Verdict(HANG, stall.message(), stall)


def known_cause_rule(command: Sequence[str], options: Any = None,
                     grace_s: float = KNOWN_CAUSE_S) -> Optional[CollectiveRule]:
    """The known-cause rule of a run of `command` with ProfileOptions `options`, or None where none applies
    (ncu wraps one rank alone). Any command gets it: a program no launcher announced is still found to be
    multi-process when ncu connects to several of its processes at once."""
    if getattr(options, "rank", None) is not None:
        return None
    launch = parse_launch(command)
    return CollectiveRule(grace_s, launch.processes if launch is not None else None)


def run_rules(command: Sequence[str], options: Any, config: RunConfig) -> WatchRule:
    """The rules of one run of `command`: the known causes | config.rules(options).

    Not when the user gave the stall timeout (--stall-timeout, stall_timeout=): it wins everywhere, its
    verdicts taken as they are."""
    rule = config.rules(options)
    known = None if config.stall_timeout_given else known_cause_rule(command, options, config.allowance.known_cause_s)
    return rule if known is None else known | rule

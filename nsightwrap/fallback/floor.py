"""The ladder's floor: a kernel that hangs in its first pass is tried there next.

ncu profiles a kernel by itself: the launch call does not return until the
kernel has been profiled (FACTS.md, "A real hang"). A kernel that waits for
the host, for another kernel or for another process never finishes its
first pass then, whatever is collected: on the GPU machine such a kernel
hung the same with --set basic, with SpeedOfLight, in application replay
and with one metric. Walking down rung by rung proves that at the price of
one stalled run per rung (about 4.5 s each on an H100).

So when a kernel hangs before its first pass completes, the walk tries the
ladder's floor next: the last single-pass rung in kernel replay. If even the
floor hangs, the rungs above it that also profile the kernel by itself in
kernel or application replay are skipped as implied (their first pass
serialises the kernel just as the floor's only pass did); rungs that replay
otherwise (range replay, one rank alone) or add their own ncu arguments are
still tried. If the floor works, its rows stand only until a richer rung
above it works too: the walk then goes back up, so its outcome is the one a
rung-by-rung walk would reach. Only hangs seen are recorded; implied rungs
are skips with their reason, never hang records.
"""

from __future__ import annotations

from typing import Optional

from nsightwrap.fallback.ladder import Ladder, Rung
from nsightwrap.ncu.allowance import estimate_passes
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import ONE_RANK, ReplayMode

__all__ = ["IMPLIED_HANG", "floor_index", "implied_by_floor"]

#: Why a rung is skipped once the kernel hung at the floor ({floor}: the floor rung's name).
IMPLIED_HANG = ("implied: it hung even at {floor!r} (one pass), and this rung's first pass serialises the kernel "
                "the same way")
#: Replay modes in which a kernel's first pass runs it by itself, as the floor does.
SERIALISING = (ReplayMode.KERNEL, ReplayMode.APPLICATION)


def _replay(rung: Rung, requested: ProfileOptions) -> ReplayMode:
    return ReplayMode(rung.replay_mode) if rung.replay_mode else requested.replay_mode


def floor_index(ladder: Ladder, requested: ProfileOptions) -> Optional[int]:
    """The last rung that collects in one pass, in kernel replay, on every rank, with no arguments of its own."""
    for i in range(len(ladder) - 1, 0, -1):
        rung = ladder[i]
        if rung.requested or rung.ranks == ONE_RANK or rung.extra_args:
            continue
        if _replay(rung, requested) == ReplayMode.KERNEL and estimate_passes(rung.apply(requested)[0]) == 1:
            return i
    return None


def implied_by_floor(rung: Rung, requested: ProfileOptions) -> bool:
    """Whether a hang at the floor implies one at `rung` (see the module docstring)."""
    return (rung.ranks != ONE_RANK and not rung.extra_args
            and _replay(rung, requested) in SERIALISING)

"""Where a sweep's or a walk's probes run (nsightwrap.fallback.executor): the engine's choice, as one frozen value.

Kept apart from the engine so that the Session (nsightwrap.fallback.session) can carry it: a walk and a sweep read
it from their session, and only the engine's module imports submitit's world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nsightwrap.errors import OptionsError

LOCAL, SLURM = "local", "slurm"
EXECUTORS = (LOCAL, SLURM)
#: How often the dispatcher looks at its jobs (seconds): Slurm's (sacct, cached by submitit).
POLL_S = 0.2
#: Local jobs: a look is a poll() of the job's process, so the dispatcher looks often (a probe's end is seen
#: within this, not within POLL_S: 0.1 s a probe on average).
LOCAL_POLL_S = 0.02


@dataclass(frozen=True)
class ExecutorSpec:
    """Where the probes run: `kind` local (one per local GPU) or slurm (a job array, one GPU per probe)."""

    kind: str = LOCAL
    partition: Optional[str] = None
    account: Optional[str] = None
    time: Optional[str] = None  # sbatch --time (e.g. 30, 1:00:00)
    options: tuple[tuple[str, str], ...] = ()  # more sbatch options (--slurm-opt KEY=VALUE)
    retries: int = 2  # a probe set aside is run again at most this many times
    folder: Optional[str] = None  # job files (Slurm: must be shared with the nodes); default a folder made here
    poll_s: Optional[float] = None  # how often the jobs are looked at; default LOCAL_POLL_S or POLL_S (Slurm)
    jobs: int = 0  # local: the walk's probes use the first N GPUs (0: every GPU); the sweep takes its own `jobs`

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise OptionsError(f"unknown executor {self.kind!r}; use one of {', '.join(EXECUTORS)}")
        if self.retries < 0:
            raise OptionsError(f"retries must be 0 or more, not {self.retries}")
        if self.jobs < 0:
            raise OptionsError(f"jobs must be 0 (every GPU) or more, not {self.jobs}")

    @property
    def poll(self) -> float:
        """Seconds between two looks at the jobs."""
        return self.poll_s if self.poll_s is not None else LOCAL_POLL_S if self.kind == LOCAL else POLL_S

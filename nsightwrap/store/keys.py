"""What a hang record is about: the kernel (by name pattern:
nsightwrap.ncu.names.normalize_kernel), the profiling settings (ProfileKey)
and the machine (Environment).

Hangs are matched on these, so two spellings of one kernel or two orderings
of the same sections must give the same key.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from nsightwrap.status import ALL_RANKS, ONE_RANK, RANK_MODES, REPLAY_MODES, ReplayMode
from nsightwrap.watch.gpu import gpus as list_gpus

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.options import ProfileOptions

__all__ = ["Environment", "ProfileKey", "as_key", "job_gpus"]


def _str_tuple(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"ProfileKey.{name} must be a sequence of strings, not the string {value!r}")
    items = tuple(value or ())
    for item in items:
        if not isinstance(item, str) or not item:
            raise TypeError(f"ProfileKey.{name} holds {item!r}; every item must be a non-empty string")
    return tuple(sorted(set(items)))


@dataclass(frozen=True)
class ProfileKey:
    """The profiling settings that decide whether a kernel hangs.

    Sections and metrics are kept sorted and without duplicates, so two
    keys asking for the same thing are equal and have the same canonical().
    """

    set: Optional[str] = None
    sections: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    replay_mode: str = ReplayMode.KERNEL.value
    #: "all": ncu wraps the whole program (every rank of a multi-process job);
    #: "one": ncu wraps one rank alone (see nsightwrap.watch.launchers).
    ranks: str = ALL_RANKS

    def __post_init__(self) -> None:
        if self.set is not None and (not isinstance(self.set, str) or not self.set):
            raise TypeError(f"ProfileKey.set={self.set!r} must be a non-empty string or None")
        object.__setattr__(self, "sections", _str_tuple("sections", self.sections))
        object.__setattr__(self, "metrics", _str_tuple("metrics", self.metrics))
        mode = getattr(self.replay_mode, "value", self.replay_mode)
        if mode not in REPLAY_MODES:
            raise ValueError(f"ProfileKey.replay_mode={self.replay_mode!r}; use one of {', '.join(REPLAY_MODES)}")
        object.__setattr__(self, "replay_mode", mode)
        if self.ranks not in RANK_MODES:
            raise ValueError(f"ProfileKey.ranks={self.ranks!r}; use one of {', '.join(RANK_MODES)}")

    @classmethod
    def from_options(cls, options: "ProfileOptions") -> "ProfileKey":
        """The key of a ProfileOptions (kernel filters and launch counts are not part of it; which
        rank is profiled is not either, only whether one rank alone is)."""
        ranks = ONE_RANK if getattr(options, "rank", None) is not None else ALL_RANKS
        return cls(options.set, options.sections, options.metrics, str(options.replay_mode), ranks)

    @classmethod
    def parse(cls, canonical: str) -> "ProfileKey":
        """The inverse of canonical()."""
        try:
            data = json.loads(canonical)
            return cls(data["set"], tuple(data["sections"]), tuple(data["metrics"]), data["replay_mode"],
                       data.get("ranks", ALL_RANKS))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a canonical profile key: {canonical!r} ({e})") from None

    def canonical(self) -> str:
        """A stable string naming these settings: compact JSON, keys and lists sorted.

        ``ranks`` appears only when one rank alone is profiled, so keys
        recorded before multi-process jobs were known keep their spelling.
        """
        data = {"metrics": list(self.metrics), "replay_mode": self.replay_mode, "sections": list(self.sections),
                "set": self.set}
        if self.ranks != ALL_RANKS:
            data["ranks"] = self.ranks
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def describe(self) -> str:
        """A short phrase for people: ``set full``, ``sections A+B, kernel replay``,
        ``metrics gpu__time_duration.sum, application replay``.

        The replay mode is named unless the key is a plain set (or nothing)
        in kernel replay, ncu's default.
        """
        parts = []
        if self.set:
            parts.append(f"set {self.set}")
        if self.sections:
            parts.append("sections " + "+".join(self.sections))
        if self.metrics:
            parts.append("metrics " + "+".join(self.metrics))
        text = " + ".join(parts) or "ncu's default set"
        if self.replay_mode != ReplayMode.KERNEL or self.sections or self.metrics:
            text += f", {self.replay_mode} replay"
        if self.ranks == ONE_RANK:
            text += ", one rank"
        return text

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class Environment:
    """Where a verdict was reached: host, GPU model, driver and ncu version,
    and the job's size: how many processes (ranks) and GPUs it had.

    Hangs are matched on gpu, driver, ncu_version and processes (a collective
    that hangs in a 2-rank job says nothing about a single-process run of the
    same kernel; store.queries.applies is the rule); the GPU count is
    reported. Any field but
    processes may be None (unknown).
    """

    host: Optional[str] = None
    gpu: Optional[str] = None
    driver: Optional[str] = None
    ncu_version: Optional[str] = None
    processes: int = 1
    gpus: Optional[int] = None

    @classmethod
    def detect(cls, ncu_version: Optional[str] = None, *, processes: int = 1, local_processes: Optional[int] = None,
               cuda_visible: Optional[str] = None, nvidia_smi: Optional[str] = None,
               timeout: float = 15.0, gpus: Optional[Callable[[], Any]] = None) -> "Environment":
        """This machine: host name, and the first GPU's name and driver from
        nvidia-smi (None when nvidia-smi is missing or fails); and the job:
        `processes` in all, `local_processes` of them here (default: all),
        on the GPUs CUDA_VISIBLE_DEVICES (`cuda_visible`) leaves. gpus: the GPU
        listing already asked (watch.gpu.gpus' answer), else nvidia-smi is
        asked now. Never raises."""
        try:
            host: Optional[str] = socket.gethostname() or None
        except OSError:  # pragma: no cover - gethostname does not fail in practice
            host = None
        gpu = driver = None
        listed = gpus() if gpus is not None else list_gpus(nvidia_smi, timeout)
        known = [g for g in listed or () if g.name]
        if known:
            gpu, driver = known[0].name, known[0].driver or None
        gpus = job_gpus(local_processes or processes, len(known) if listed is not None else None, cuda_visible)
        return cls(host, gpu, driver, ncu_version, processes, gpus)

    def describe(self) -> str:
        job = "" if self.processes == 1 else f", {self.processes} processes on {self.gpus or '?'} GPU(s)"
        return (f"{self.gpu or 'unknown GPU'} (driver {self.driver or 'unknown'}, "
                f"ncu {self.ncu_version or 'unknown'}{job})")


def job_gpus(local_processes: int, listed: Optional[int], cuda_visible: Optional[str]) -> Optional[int]:
    """The GPUs a job's processes on this machine can use: one each, up to those visible to them
    (CUDA_VISIBLE_DEVICES when set, else the GPUs nvidia-smi lists); None when unknown."""
    if cuda_visible is not None:
        listed = len([d for d in cuda_visible.split(",") if d.strip()])
    if listed is None or listed == 0:
        return None
    return max(1, min(local_processes, listed))


def as_key(key: Any) -> ProfileKey:
    """A ProfileKey from a ProfileKey or a ProfileOptions (duck-typed: the store sits below ncu)."""
    if isinstance(key, ProfileKey):
        return key
    if hasattr(key, "replay_mode") and hasattr(key, "sections"):  # ProfileOptions
        return ProfileKey.from_options(key)
    raise TypeError(f"key must be a ProfileKey (or ProfileOptions), not {type(key).__name__}")

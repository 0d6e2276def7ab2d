"""Which processes hold the GPU, through nvidia-smi when it exists.

Hangs recorded while a foreign process keeps a kernel spinning are false
(on the GPU machine every later run hung too), so the watched run looks
before and after. Without nvidia-smi both checks say "unknown" (None).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import psutil

from nsightwrap.watch.tree import alive


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_memory: str


def _smi(args: Sequence[str], nvidia_smi: Optional[str], timeout: float) -> Optional[str]:
    """nvidia-smi's output for `args`, or None when it is missing, fails or hangs."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def compute_processes(nvidia_smi: Optional[str] = None, timeout: float = 15.0) -> Optional[list[GpuProcess]]:
    """Compute processes on the GPUs, or None when that cannot be known."""
    text = _smi(["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"], nvidia_smi, timeout)
    return None if text is None else parse_compute_apps(text)


class LastListing:
    """The compute-process listing taken after one attempt (the check for processes it left), handed to the
    next attempt's look for foreign processes when that starts within `fresh_s`: the GPU is asked once
    between two attempts, not twice. Used once; a later look asks nvidia-smi again."""

    def __init__(self, fresh_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.fresh_s, self._clock = fresh_s, clock
        self._lock = threading.Lock()
        self._taken: Optional[tuple[float, list[GpuProcess]]] = None

    def put(self, processes: Optional[list[GpuProcess]]) -> None:
        with self._lock:
            self._taken = None if processes is None else (self._clock(), list(processes))

    def take(self) -> Optional[list[GpuProcess]]:
        """The listing, when taken less than fresh_s ago (and not yet used), else None."""
        with self._lock:
            taken, self._taken = self._taken, None
        if taken is None or self._clock() - taken[0] > self.fresh_s:
            return None
        return taken[1]


def parse_compute_apps(text: str) -> list[GpuProcess]:
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            found.append(GpuProcess(int(parts[0]), parts[1], parts[2] if len(parts) > 2 else ""))
    return found


def foreign(processes: Optional[Sequence[GpuProcess]], ours: Iterable[int]) -> list[GpuProcess]:
    """Listed processes that are not `ours` and still alive.

    `ours` is read after nvidia-smi answered, so a process of ours that was
    listed and then ended is in neither: it is gone, and holds no GPU. One
    that has exited but is not yet reaped (a zombie, which nvidia-smi may
    still list for a moment) is gone too: an exited process holds no GPU
    context, and its environment, which would say whose it is, can no longer
    be read.
    """
    if not processes:
        return []
    mine = set(ours)
    return [p for p in processes if p.pid not in mine and _running(p.pid)]


def _running(pid: int) -> bool:
    """`pid` is a process that has not exited (not gone, not a zombie)."""
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def gpu_count(nvidia_smi: Optional[str] = None) -> Optional[int]:
    """Number of GPUs nvidia-smi lists, or None when it cannot say."""
    text = _smi(["-L"], nvidia_smi, 15.0)
    return None if text is None else sum(1 for line in text.splitlines() if line.startswith("GPU "))


@dataclass(frozen=True)
class GpuInfo:
    name: str
    driver: str


def gpus(nvidia_smi: Optional[str] = None, timeout: float = 15.0) -> Optional[list[GpuInfo]]:
    """Each GPU's name and the driver version, or None when nvidia-smi is missing or fails."""
    text = _smi(["--query-gpu=name,driver_version", "--format=csv,noheader"], nvidia_smi, timeout)
    if text is None:
        return None
    rows = [[p.strip() for p in line.rsplit(",", 1)] for line in text.splitlines() if "," in line]
    return [GpuInfo(name, driver) for name, driver in rows]

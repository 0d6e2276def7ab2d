"""Events that the output parser produces from ncu's merged stdout/stderr.

Each event is a small frozen dataclass. Consumers (the stall rule, the
attempt record) dispatch on type. Events carry no timestamps: the watched
run stamps them as it receives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(frozen=True)
class Connected:
    """`==PROF== Connected to process PID (EXE)`."""

    pid: int
    exe: str


@dataclass(frozen=True)
class Disconnected:
    """`==PROF== Disconnected from process PID`."""

    pid: int


@dataclass(frozen=True)
class KernelStarted:
    """`==PROF== Profiling "NAME" - ID: ` (kernel replay; before any progress).

    With a kernel-name filter ncu prints no ID; the parser then numbers the
    kernels of each process in order."""

    name: str
    kernel_id: int


@dataclass(frozen=True)
class Progress:
    """One progress mark of the kernel in progress.

    mark is "0%", "50%", "100%" or "."; percent is the last percent mark seen
    for this kernel (0, 50 or 100) and dots the number of dots seen so far.
    kernel_id is None for the report-creation progress of application replay.
    """

    kernel_id: Optional[int]
    mark: str
    percent: int
    dots: int


@dataclass(frozen=True)
class KernelDone:
    """`100% - N passes` closing a kernel-replay progress line."""

    name: str
    kernel_id: int
    passes: int


@dataclass(frozen=True)
class ReplayPass:
    """`==PROF== Profiling "NAME" - ID: Application replay pass N`."""

    name: str
    kernel_id: int
    pass_number: int


@dataclass(frozen=True)
class ReportCreation:
    """`==PROF== Creating report from application replay data: ` started."""


@dataclass(frozen=True)
class NcuWarning:
    """A `==WARNING== ...` line (text without the prefix)."""

    text: str


@dataclass(frozen=True)
class NcuError:
    """An `==ERROR== ...` line (text without the prefix)."""

    text: str


@dataclass(frozen=True)
class ReportWritten:
    """`==PROF== Report: PATH`."""

    path: str


@dataclass(frozen=True)
class ProfNote:
    """Any other `==PROF==` line (text without the prefix)."""

    text: str


@dataclass(frozen=True)
class Output:
    """A line of the target program's own output (without the newline)."""

    text: str


Event = Union[
    Connected,
    Disconnected,
    KernelStarted,
    Progress,
    KernelDone,
    ReplayPass,
    ReportCreation,
    NcuWarning,
    NcuError,
    ReportWritten,
    ProfNote,
    Output,
]

#: ncu's "taking more time than expected" warning starts with this.
SLOW_LAUNCH_WARNING = "Launching the workload is taking more time than expected"

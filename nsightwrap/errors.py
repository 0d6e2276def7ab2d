"""One exception hierarchy. Every message says what to do next."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Union

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.nsys.run import NsysRun


class NsightwrapError(Exception):
    """Base of every error nsightwrap raises on purpose."""


class ToolNotFound(NsightwrapError):
    """A profiler (ncu, nsys, compute-sanitizer) could not be located."""

    def __init__(self, tool: str, searched: Sequence[str], hint: str):
        self.tool = tool
        self.searched = list(searched)
        lines = [f"{tool} was not found."]
        if self.searched:
            lines.append("Looked in:")
            lines.extend(f"  - {s}" for s in self.searched)
        lines.append(hint)
        super().__init__("\n".join(lines))


class ToolError(NsightwrapError):
    """The profiler ran but did not answer as expected (version, lists)."""


class OptionsError(NsightwrapError):
    """Profiling options that ncu would reject, caught before launching."""


class AttemptFailed(NsightwrapError):
    """A watched run ended other than ok; carries the attempt record."""

    def __init__(self, attempt: "Attempt", message: str | None = None):
        self.attempt = attempt
        super().__init__(message or attempt.describe())


class AttemptHung(AttemptFailed):
    """The profiled program stalled and was stopped."""


class NsysFailed(NsightwrapError):
    """An nsys run ended other than ok; carries the NsysRun."""

    def __init__(self, run: "NsysRun"):
        self.run = run
        super().__init__(run.describe())


class NsysInterrupted(KeyboardInterrupt):
    """Ctrl-C during `profile_nsys`, re-raised after the tree was stopped; carries the run."""

    def __init__(self, run: "NsysRun"):
        super().__init__(run.describe())
        self.run = run


class ReportError(NsightwrapError):
    """A report could not be read, or what was asked of it is not in it.

    Carries ``path`` (None when there is no file to name), ``problem`` and
    ``hint`` (what to do next).
    """

    def __init__(self, path: Union[str, os.PathLike, None], problem: str, hint: str = ""):
        self.path = None if path is None else str(path)
        self.problem = problem
        self.hint = hint
        message = f"{self.path}: {problem}" if self.path else problem
        if hint:
            message += "\n" + hint
        super().__init__(message)


class StoreError(NsightwrapError):
    """The hang store cannot be opened, read or written; says what to do."""

    def __init__(self, path: Union[str, os.PathLike, None], message: str):
        self.path = None if path is None else Path(path)
        super().__init__(message)

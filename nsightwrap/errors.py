"""One exception hierarchy. Every message says what to do next.

Imports nothing from the package but nsightwrap.secrets (the layer below), so every layer can raise from here;
`did_you_mean` is the one close-match helper those messages use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence, Union

from nsightwrap.secrets import mask_text

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.nsys.run import NsysRun


def close_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.5) -> list[str]:
    """The choices closest to ``word``, best first; case slips ("speedoflight")
    are caught too, since they score low on plain ratios."""
    import difflib  # here: every nsightwrap process imports this module, few suggest a spelling

    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=n, cutoff=cutoff)
    if not close:
        lowered = {c.lower(): c for c in choices}
        close = [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=cutoff)]
    return close


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """``"did you mean 'a' or 'b'?"``, or ``""`` when nothing is close."""
    close = close_matches(word, choices, n=n)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class NsightwrapError(Exception):
    """Base of every error nsightwrap raises on purpose; its message has secret values masked
    (nsightwrap.secrets), wherever it is printed or logged."""

    def __str__(self) -> str:
        return mask_text(super().__str__())


class ToolNotFound(NsightwrapError):
    """A profiler (ncu, nsys, compute-sanitizer) could not be located."""

    def __init__(self, tool: str, searched: Sequence[str], hint: str) -> None:
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


class LadderError(OptionsError):
    """A profile file that cannot be used: says which file, which rung, what to fix."""


class AttemptFailed(NsightwrapError):
    """A watched run ended other than ok; carries the attempt record."""

    def __init__(self, attempt: "Attempt", message: str | None = None) -> None:
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

    def __init__(self, path: Union[str, os.PathLike, None], problem: str, hint: str = "") -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        self.hint = hint
        message = f"{self.path}: {problem}" if self.path else problem
        if hint:
            message += "\n" + hint
        super().__init__(message)


class StoreError(NsightwrapError):
    """The hang store cannot be opened, read or written; says what to do."""

    def __init__(self, path: Union[str, os.PathLike, None, object], message: str):
        # The store's file; None for a database (a StoreLocation given here names no file).
        self.path = Path(path) if isinstance(path, (str, os.PathLike)) else None
        super().__init__(message)


class ChildError(NsightwrapError):
    """fn raised in the child process; `.child_traceback` holds its traceback."""

    def __init__(self, message: str, child_traceback: str, attempts: Sequence["Attempt"] = ()) -> None:
        super().__init__(f"{message}\n--- traceback in the child process ---\n{child_traceback}")
        self.child_traceback = child_traceback
        self.attempts = list(attempts)


class NotProfilable(NsightwrapError):
    """fn or its arguments cannot travel to a child process."""


class ProgramNotRunnable(NsightwrapError):
    """The program to profile is missing (not on PATH, no such file) or not executable; found before launching.

    Carries ``program`` (as given) and ``problem``; the message says what to do.
    """

    def __init__(self, program: str, problem: str, hint: str) -> None:
        self.program = program
        self.problem = problem
        super().__init__(f"cannot run the program {program!r}: {problem}. {hint}")


class ProfileInterrupted(KeyboardInterrupt):
    """Ctrl-C during a watched run, re-raised after the tree was stopped.

    A KeyboardInterrupt, not an NsightwrapError, so that a script's Ctrl-C
    still ends the script; it carries the attempt, whose partial report is
    kept.
    """

    def __init__(self, attempt: "Attempt") -> None:
        super().__init__(attempt.describe())
        self.attempt = attempt

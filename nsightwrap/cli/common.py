"""What the commands share: argument types, the command after `--`, echo, signals."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from nsightwrap.status import EXIT_CODES, USAGE_EXIT_CODE
from nsightwrap.watch.signals import interruptible

EPILOG = ("exit codes: " + ", ".join(f"{v} {k}" for k, v in EXIT_CODES.items())
          + f", {USAGE_EXIT_CODE} usage/set-up error")


def positive(text: str) -> float:
    """argparse type: seconds > 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def split_command(extra: Sequence[str]) -> list[str]:
    """The command given after `--`."""
    extra = list(extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return extra


def echo(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def echo_unless(quiet: bool) -> Optional[Callable[[str], None]]:
    return None if quiet else echo


#: SIGTERM and SIGHUP stop the tree like Ctrl-C does, for the whole command
#: (probing ncu and walking a ladder included): no orphan when a CI job is
#: cancelled; the signals that follow the first are counted, not raised.
signals_as_interrupt = interruptible

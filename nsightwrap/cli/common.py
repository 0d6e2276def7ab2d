"""What the commands share: argument types, the command after `--`, JSON, logging."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any, Callable, Optional, Sequence

from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import DEFAULT_CALIBRATION_LIMIT_S
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE

EPILOG = ("exit codes: " + ", ".join(f"{v} {k}" for k, v in EXIT_CODES.items())
          + f", {USAGE_EXIT_CODE} usage/set-up error")

#: The logger of nsightwrap's own messages (--verbose shows them).
LOGGER = "nsightwrap"


class UsageError(NsightwrapError):
    """A command line argparse refused; raised instead of argparse's exit so --json can still answer."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError (sub-parsers inherit the class)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", self.format_usage())


def positive(text: str) -> float:
    """argparse type: seconds > 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def add_calibration_limit(parser: argparse.ArgumentParser) -> None:
    """--calibration-limit SEC (run, run --profile, sweep-sections): RunConfig.calibration_limit."""
    parser.add_argument(
        "--calibration-limit", type=positive, default=DEFAULT_CALIBRATION_LIMIT_S, metavar="SEC",
        help="when a stall is calibrated, how long the stalled kernel may run without ncu (a plain run: this "
             "long after the program reached it under ncu) before the program is reported as hanging by itself "
             f"(status timeout, program_fault), never as an ncu hang (default {DEFAULT_CALIBRATION_LIMIT_S:g})")


def split_command(extra: Sequence[str]) -> list[str]:
    """The command given after `--`."""
    extra = list(extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return extra


def wants_json(argv: Sequence[str]) -> bool:
    """--json among nsightwrap's own options (before `--`), asked before argparse has parsed anything."""
    argv = list(argv)
    own = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in own


def print_json(doc: dict[str, Any]) -> None:
    """The one JSON object of a command, on stdout, secret values masked."""
    print(json.dumps(mask_doc(doc)))


def error_doc(message: str, exit_code: int = USAGE_EXIT_CODE, **more: Any) -> dict[str, Any]:
    return {"status": "error", "exit_code": exit_code, "error": message, **more}


def interrupted_doc(reason: str = "interrupted (Ctrl-C or a termination signal) between two attempts; "
                                  "nothing was left running", **more: Any) -> dict[str, Any]:
    return {"status": INTERRUPTED, "exit_code": EXIT_CODES[INTERRUPTED], "reason": reason, **more}


class LineLog(logging.Handler):
    """nsightwrap's log as lines through `write` (the screen), remembering what it printed."""

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__(logging.DEBUG)
        self.write = write
        self.printed: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = mask_text(record.getMessage())
        self.printed.add(message)
        self.write(f"nsightwrap: {record.levelname.lower()}: {message}")


def configure_logging(verbose: bool, write: Callable[[str], None]) -> Optional[LineLog]:
    """--verbose: every message of nsightwrap's log once, through `write`; else none (notes say it)."""
    logger = logging.getLogger(LOGGER)
    for h in [h for h in logger.handlers if isinstance(h, LineLog)]:
        logger.removeHandler(h)
    if not verbose:
        return None
    handler = LineLog(write)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


def without_logged(text: str, log: Optional[LineLog]) -> str:
    """`text` without the `note: X` lines whose X the log already printed: each message once."""
    if log is None:
        return text
    return "\n".join(line for line in text.splitlines()
                     if not (line.startswith("note: ") and line[6:] in log.printed))


"""What the commands share: argument types, the command after `--`, JSON, logging."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import IO, Any, Callable, Optional, Sequence

from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import DEFAULT_CALIBRATION_LIMIT_S
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import ERROR, EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE
from nsightwrap.watch.rules import DEFAULT_STUCK_TIMEOUT
from nsightwrap.watch.signals import settle
from nsightwrap.watch.writer import lost_output, silence

EPILOG = ("exit codes: " + ", ".join(f"{v} {k}" for k, v in EXIT_CODES.items())
          + f", {USAGE_EXIT_CODE} usage/set-up error")

#: The logger of nsightwrap's own messages (--verbose shows them).
LOGGER = "nsightwrap"
#: Before the JSON object: how long stderr's writer may take to write what waits (seconds).
LOST_OUTPUT_WAIT_S = 0.2


class UsageError(NsightwrapError):
    """A command line argparse refused; raised instead of argparse's exit so --json can still answer."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError (sub-parsers inherit the class).

    ``commands``: the sub-command parsers by name (set where they are added), so that a command's
    library messages can be spelled in its flags (:func:`in_flags`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", self.format_usage())


#: The library's parameter names (as its messages spell them) that a CLI option sets under another
#: dest; every other name is its option's dest (launch_skip -> --launch-skip). A tuple: the first of
#: those options that the user typed names it.
PARAMETER_DESTS: dict[str, tuple[str, ...]] = {
    "set": ("section_set",),
    "sections": ("section",),
    "kernel": ("kernel", "kernel_name"),
    "KernelFilter.pattern": ("kernel", "kernel_name"),
    "KernelFilter.base": ("kernel_name_base",),
}
# A Python hint (`export= in Python`, `stall_timeout=SEC in Python`) is left as it is: it names the parameter.
_ASSIGNED = re.compile(r"(?<![\w./-])((?:KernelFilter\.)?[A-Za-z_]\w*)=(?=\S)(?![:;,)])(?!\S* in Python)")
_BARE = re.compile(r"(?<![\w./-])((?:KernelFilter\.)?[A-Za-z_]\w*)=(?=[\s:;,)]|$)(?! in Python)")
_NAMED = re.compile(r"(?<![\w./-])((?:KernelFilter\.)?[a-z]+(?:_[a-z]+)+|KernelFilter\.[a-z]+)(?![\w=/])"
                    r"(?![.-]\w)(?! in Python)")


def in_flags(message: str, parser: Optional[argparse.ArgumentParser], argv: Sequence[str]) -> str:
    """A library message as the command line's user reads it: `launch_count=0 ...; use None` becomes
    `--launch-count 0 ...; leave the option out`, and `stall_timeout` `--stall-timeout`. Only names
    that an option of `parser` sets are changed, each to the spelling the user typed (-o or --export)."""
    if parser is None:
        return message
    typed = [a.split("=", 1)[0] for a in (argv[: list(argv).index("--")] if "--" in argv else argv)]
    flags = {a.dest: _spelling(a.option_strings, typed) for a in _actions(parser, typed) if a.option_strings}

    def flag(name: str) -> Optional[str]:
        dests = PARAMETER_DESTS.get(name, (name,))
        found = [flags[d] for d in dests if d in flags]
        return next((f for f in found if f in typed), found[0] if found else None)

    def named(m: re.Match[str]) -> Optional[str]:
        return None if _in_path(m) else flag(m[1])

    said = message
    message = _BARE.sub(lambda m: named(m) or m[0], message)  # `nsys=` names the parameter itself
    message = _ASSIGNED.sub(lambda m: f"{named(m)} " if named(m) else m[0], message)
    message = _NAMED.sub(lambda m: named(m) or m[0], message)
    if message != said:  # a Python value has no command-line spelling: an option left out is "None"
        message = message.replace(" or None", "").replace("use None", "leave the option out")
    return message


def _in_path(m: re.Match[str]) -> bool:
    """The name matched is part of a path-like word (`/tmp/stall_timeout/r`, `'./x/launch_count'`): after a
    `/` of its word, or right before one; a path is never the parameter."""
    text, start, end = m.string, m.start(1), m.end(1)
    word_start = max(text.rfind(c, 0, start) for c in " \t\n") + 1
    return "/" in text[word_start:start] or text[end:end + 1] == "/"


def _actions(parser: argparse.ArgumentParser, typed: Sequence[str]) -> list[argparse.Action]:
    """The options of `parser` and of the sub-commands typed (`nsys profile`)."""
    found = list(parser._actions)
    for action in parser._actions:
        for name, sub in (action.choices or {}).items() if isinstance(action.choices, dict) else ():
            if name in typed:
                found += _actions(sub, typed)
    return found


def _spelling(options: Sequence[str], typed: Sequence[str]) -> str:
    """The option string the user typed, else its long form."""
    return next((o for o in options if o in typed), max(options, key=len))


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


def add_stuck_timeout(parser: argparse.ArgumentParser) -> None:
    """--stuck-timeout SEC (run, sweep-sections): RunConfig.stuck_timeout, which the stuck-ncu reason names."""
    parser.add_argument(
        "--stuck-timeout", type=positive, default=DEFAULT_STUCK_TIMEOUT, metavar="SEC",
        help="after the program has ended, how long ncu may stay silent without exiting before it is "
             f"called stuck (exit 5) and stopped (default {DEFAULT_STUCK_TIMEOUT:g})")


def given(text: str) -> str:
    """argparse type: a value that is not empty, since an empty one would silently mean "not given"."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty, got {text!r}; leave the option out for its default")
    return text


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


def print_json(doc: dict[str, Any], out: Optional[IO[str]] = None) -> None:
    """The one JSON object of a command, on stdout (or `out`), secret values masked; after it, signals
    change neither it nor the exit code.

    Output that stderr's writer could not write (nobody read it) is said in `warnings`. A reader of
    stdout that went away costs no traceback: stdout then points at /dev/null, and the object counts as
    said (the command's exit code stands).
    """
    settle()
    out = sys.stdout if out is None else out
    text = json.dumps(mask_doc(_with_lost_output(doc))) + "\n"
    answer = getattr(out, "answer", None)  # a watch.writer.ReaderSafe, installed by cli.main
    if answer is not None:
        answer(text)
        return
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        silence(out)


def _with_lost_output(doc: dict[str, Any]) -> dict[str, Any]:
    writer = getattr(sys.stderr, "writer", None)  # a watch.writer.TextOut, installed by cli.main
    if writer is None:
        return doc
    writer.flush(LOST_OUTPUT_WAIT_S)
    lost = writer.dropped + writer.pending
    if not lost:
        return doc
    return {**doc, "warnings": [*doc.get("warnings", []), lost_output(lost)]}


def error_doc(message: str, exit_code: int = USAGE_EXIT_CODE, **more: Any) -> dict[str, Any]:
    return {"status": ERROR, "exit_code": exit_code, "error": message, **more}


def interrupted_doc(reason: str = "interrupted (Ctrl-C or a termination signal) between two attempts; "
                                  "nothing was left running", **more: Any) -> dict[str, Any]:
    return {"status": INTERRUPTED, "exit_code": EXIT_CODES[INTERRUPTED], "reason": reason, **more}


def store_used(location: Any, store: Any = None) -> dict[str, Any]:
    """An interrupted or failed document's store fields: the store actually used (`store`, a HangStore: the local
    file when the team's database was down), else the `location` asked for (a StoreLocation; nothing opened
    yet), shown with its password masked; and the store's notes (where the records went instead)."""
    if store is not None:
        return {"store": store.location.shown, "notes": list(store.notes)}
    return {"store": location.shown, "notes": []}


class LineLog(logging.Handler):
    """nsightwrap's log as lines through `write` (the screen), remembering what it printed."""

    def __init__(self, write: Callable[[str], None], level_before: int = logging.NOTSET) -> None:
        super().__init__(logging.DEBUG)
        self.write = write
        self.printed: set[str] = set()
        self.level_before = level_before  # the logger's level, given back when the command ends

    def emit(self, record: logging.LogRecord) -> None:
        message = mask_text(record.getMessage())
        self.printed.add(message)
        self.write(f"nsightwrap: {record.levelname.lower()}: {message}")


def configure_logging(verbose: bool, write: Callable[[str], None]) -> Optional[LineLog]:
    """--verbose: every message of nsightwrap's log once, through `write`; else none (notes say it). Called again
    with False as the command ends: the logger is left as the command found it (its level too: a caller of
    main() in its own process, a script or a test, gets no DEBUG records afterwards)."""
    logger = logging.getLogger(LOGGER)
    for h in [h for h in logger.handlers if isinstance(h, LineLog)]:
        logger.removeHandler(h)
        logger.setLevel(h.level_before)
    if not verbose:
        return None
    handler = LineLog(write, logger.level)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


def without_logged(text: str, log: Optional[LineLog]) -> str:
    """`text` without the `note: X` lines whose X the log already printed: each message once."""
    if log is None:
        return text
    return "\n".join(line for line in text.splitlines()
                     if not (line.startswith("note: ") and line[6:] in log.printed))


"""The commands of the command line: the parser, and one command run to its exit code.

Loaded by nsightwrap.cli.main once the stop signals are owned (these
imports take a few hundred milliseconds).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, Optional, Sequence

from nsightwrap.cli.common import Parser, UsageError, error_doc, in_flags, interrupted_doc, print_json, wants_json
from nsightwrap.errors import LadderError, NsightwrapError
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE
from nsightwrap.version import __version__
from nsightwrap.watch.signals import raise_if_dropped

#: Each command: its module in nsightwrap.cli, the function there that adds its parser, the one that runs it.
#: A module is imported only when its command is given (or the whole parser is built, for help and errors):
#: `hangs list` loads no profiler code, `run` no sweep, triage or bundle code (every start counts: issue 20).
COMMAND_TABLE: dict[str, tuple[str, str, str]] = {
    "run": ("run", "add_parser", "cmd_run"),
    "sweep-sections": ("sweep", "add_parser", "cmd_sweep"),
    "triage": ("triage", "add_parser", "cmd_triage"),
    "hangs": ("hangs", "add_hangs_parser", "cmd_hangs"),
    "nsys": ("nsys", "add_nsys_parser", "cmd_nsys"),
    "cleanup": ("cleanup", "add_cleanup_parser", "cmd_cleanup"),
    "doctor": ("doctor", "add_parser", "cmd_doctor"),
}


def _command_part(name: str, which: int) -> Callable[..., Any]:
    module, *functions = COMMAND_TABLE[name]
    return getattr(importlib.import_module(f"nsightwrap.cli.{module}"), functions[which])


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or only command `only`'s (the one given: what it parses
    and prints is the same, its usage line and errors included)."""
    parser = Parser(prog="python -m nsightwrap", description="Run NVIDIA profilers under a watchdog.")
    parser.add_argument("--version", action="version", version=f"nsightwrap {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    for name in [only] if only in COMMAND_TABLE else COMMAND_TABLE:
        _command_part(name, 0)(sub)
    parser.commands = dict(sub.choices)
    return parser


def run_command(argv: Sequence[str], loaded: Callable[[], None] = lambda: None) -> int:
    """Parse argv and run its command; with --json, exactly one JSON object on stdout. `loaded()` is called
    once the command's module is imported, before the command runs (main's CollectorPause.resume)."""
    as_json = wants_json(argv)
    parser = build_parser(only=argv[0] if argv else None)
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return _usage_error(e, as_json)
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return _usage_error(UsageError("give a command, e.g. `python -m nsightwrap run -- ./my_app`"), as_json)
    try:
        command = _command_part(args.cmd, 1)  # its module imported
        loaded()
        raise_if_dropped()
        return command(args)
    except UsageError as e:
        return _usage_error(e, as_json)
    except NsightwrapError as e:
        # The flags typed, not the library's parameter names; a ladder file's errors name its own keys.
        message = str(e) if isinstance(e, LadderError) else in_flags(str(e), parser.commands.get(args.cmd), argv)
        print(f"nsightwrap: {message}", file=sys.stderr)
        if as_json:
            print_json(error_doc(message))
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:  # outside a watched run (each run stops its own tree): doctor, hangs, nsys
        print("nsightwrap: interrupted", file=sys.stderr)
        if as_json:
            print_json(interrupted_doc("interrupted"))
        return EXIT_CODES[INTERRUPTED]


def _usage_error(e: UsageError, as_json: bool) -> int:
    print(f"{e.usage}{e}" if e.usage else str(e), file=sys.stderr)
    if as_json:
        print_json(error_doc(str(e), usage=e.usage.strip()))
    return USAGE_EXIT_CODE


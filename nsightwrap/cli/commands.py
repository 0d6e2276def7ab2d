"""The commands of the command line: the parser, and one command run to its exit code.

Loaded by nsightwrap.cli.main once the stop signals are owned (these
imports take a few hundred milliseconds).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from nsightwrap.cli import doctor, run, sweep, triage
from nsightwrap.cli.cleanup import add_cleanup_parser, cmd_cleanup
from nsightwrap.cli.common import Parser, UsageError, error_doc, in_flags, interrupted_doc, print_json, wants_json
from nsightwrap.cli.doctor import cmd_doctor
from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
from nsightwrap.cli.nsys import add_nsys_parser, cmd_nsys
from nsightwrap.cli.run import cmd_run
from nsightwrap.cli.sweep import cmd_sweep
from nsightwrap.errors import LadderError, NsightwrapError
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE
from nsightwrap.version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m nsightwrap", description="Run NVIDIA profilers under a watchdog.")
    parser.add_argument("--version", action="version", version=f"nsightwrap {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    run.add_parser(sub)
    sweep.add_parser(sub)
    triage.add_parser(sub)
    add_hangs_parser(sub)
    add_nsys_parser(sub)
    add_cleanup_parser(sub)
    doctor.add_parser(sub)
    parser.commands = dict(sub.choices)
    return parser


def run_command(argv: Sequence[str]) -> int:
    """Parse argv and run its command; with --json, exactly one JSON object on stdout."""
    as_json = wants_json(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return _usage_error(e, as_json)
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return _usage_error(UsageError("give a command, e.g. `python -m nsightwrap run -- ./my_app`"), as_json)
    try:
        return COMMANDS[args.cmd](args)
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


COMMANDS = {"run": cmd_run, "cleanup": cmd_cleanup, "doctor": cmd_doctor, "sweep-sections": cmd_sweep,
            "hangs": cmd_hangs, "nsys": cmd_nsys, "triage": triage.cmd_triage}

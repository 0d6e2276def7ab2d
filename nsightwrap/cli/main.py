"""`python -m nsightwrap ...`: the command line; each command lives in its own module.

Exit codes of `run`: 0 ok, 3 hang, 4 timeout, 5 error (ncu refused or
failed), 6 no kernels profiled, 7 crashed (the program failed), 130
interrupted, 2 usage or set-up problem found before launching.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from nsightwrap import __version__
from nsightwrap.cli import doctor, run, sweep
from nsightwrap.cli.cleanup import add_cleanup_parser, cmd_cleanup
from nsightwrap.cli.common import Parser, UsageError, error_doc, in_flags, interrupted_doc, print_json, wants_json
from nsightwrap.cli.doctor import cmd_doctor
from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
from nsightwrap.cli.nsys import add_nsys_parser, cmd_nsys
from nsightwrap.cli.run import cmd_run
from nsightwrap.cli.sweep import cmd_sweep
from nsightwrap.errors import LadderError, NsightwrapError
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE
from nsightwrap.watch.signals import ignore_stop_signals


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m nsightwrap", description="Run NVIDIA profilers under a watchdog.")
    parser.add_argument("--version", action="version", version=f"nsightwrap {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    run.add_parser(sub)
    sweep.add_parser(sub)
    add_hangs_parser(sub)
    add_nsys_parser(sub)
    add_cleanup_parser(sub)
    doctor.add_parser(sub)
    parser.commands = dict(sub.choices)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit code of the command; with --json, stdout holds exactly one JSON object whatever happens."""
    from_shell = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
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
        code = COMMANDS[args.cmd](args)
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
        code = EXIT_CODES[INTERRUPTED]
    if code == EXIT_CODES[INTERRUPTED] and from_shell:
        ignore_stop_signals()  # exiting: a late Ctrl-C or SIGTERM must not turn into a traceback or -15
    return code


def _usage_error(e: UsageError, as_json: bool) -> int:
    print(f"{e.usage}{e}" if e.usage else str(e), file=sys.stderr)
    if as_json:
        print_json(error_doc(str(e), usage=e.usage.strip()))
    return USAGE_EXIT_CODE


COMMANDS = {"run": cmd_run, "cleanup": cmd_cleanup, "doctor": cmd_doctor, "sweep-sections": cmd_sweep,
            "hangs": cmd_hangs, "nsys": cmd_nsys}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

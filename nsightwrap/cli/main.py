"""`python -m nsightwrap ...`: the command line; each command lives in its own module.

Exit codes of `run`: 0 ok, 3 hang, 4 timeout, 5 error (ncu refused or
failed), 6 no kernels profiled, 7 crashed (the program failed), 130
interrupted, 2 usage or set-up problem found before launching.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from nsightwrap.cli import doctor, run, sweep
from nsightwrap.cli.cleanup import add_cleanup_parser, cmd_cleanup
from nsightwrap.cli.doctor import cmd_doctor
from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
from nsightwrap.cli.nsys import add_nsys_parser, cmd_nsys
from nsightwrap.cli.run import cmd_run
from nsightwrap.cli.sweep import cmd_sweep
from nsightwrap.errors import NsightwrapError
from nsightwrap.status import EXIT_CODES, USAGE_EXIT_CODE
from nsightwrap.watch.signals import ignore_stop_signals


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nsightwrap",
                                     description="Run NVIDIA profilers under a watchdog.")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    run.add_parser(sub)
    sweep.add_parser(sub)
    add_hangs_parser(sub)
    add_nsys_parser(sub)
    add_cleanup_parser(sub)
    doctor.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return USAGE_EXIT_CODE
    try:
        code = {"run": cmd_run, "cleanup": cmd_cleanup, "doctor": cmd_doctor, "sweep-sections": cmd_sweep,
                "hangs": cmd_hangs, "nsys": cmd_nsys}[args.cmd](args)
    except NsightwrapError as e:
        print(f"nsightwrap: {e}", file=sys.stderr)
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:  # outside a watched run: no tree is left (each run stops its own)
        code = EXIT_CODES["interrupted"]
        print("nsightwrap: interrupted", file=sys.stderr)
    if code == EXIT_CODES["interrupted"] and argv is None:
        ignore_stop_signals()  # exiting: a late Ctrl-C or SIGTERM must not turn into a traceback or -15
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""How a long command ends other than with its result: refused by the preflight, or interrupted."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from nsightwrap.cli.common import error_doc, interrupted_doc, print_json
from nsightwrap.cli.preflight import FAIL, PREFLIGHT_CHECKS, WARN, Facts, as_json, failed, run_checks
from nsightwrap.cli.screen import PlainScreen
from nsightwrap.ncu.context import RunContext
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE


def report_interrupt(args: argparse.Namespace, screen: PlainScreen, doc: Optional[dict[str, Any]]) -> int:
    screen.close()
    doc = doc or interrupted_doc()
    if args.json:
        print_json(doc)
    else:
        print(f"\nnsightwrap: {doc['reason'].splitlines()[0]}", file=sys.stderr)
    return EXIT_CODES[INTERRUPTED]


def preflight(args: argparse.Namespace, context: RunContext, screen: PlainScreen) -> Optional[dict[str, Any]]:
    """Doctor's cheap checks before a long walk or sweep: an error document when one FAILs, else None."""
    if getattr(args, "no_preflight", False):
        return None
    checks = run_checks(Facts.gather(lambda: context, getattr(args, "store", None)), PREFLIGHT_CHECKS)
    for c in checks:
        if c.status in (WARN, FAIL):
            screen.line(f"[preflight] {c.line()}")
    bad = failed(checks)
    if not bad:
        return None
    return error_doc("preflight: " + "; ".join(f"{c.name}: {c.detail}" for c in bad)
                     + " (fix it, or pass --no-preflight)", preflight=as_json(checks))


def refuse(args: argparse.Namespace, screen: PlainScreen, doc: dict[str, Any]) -> int:
    screen.close()
    print(f"nsightwrap: {doc['error']}", file=sys.stderr)
    if args.json:
        print_json(doc)
    return USAGE_EXIT_CODE

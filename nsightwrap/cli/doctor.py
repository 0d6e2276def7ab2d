"""`doctor`: say which tools are found and what is missing."""

from __future__ import annotations

import argparse
from typing import Any

from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.status import USAGE_EXIT_CODE
from nsightwrap.watch import gpu


def add_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="say which tools are found and what is missing")
    doctor.add_argument("--ncu", metavar="PATH")


def cmd_doctor(args: argparse.Namespace) -> int:
    problems = 0
    try:
        context = RunContext.create(RunConfig(ncu=args.ncu))
        info = context.info
        print(f"ncu: {context.ncu} (version {info.version}; {len(info.sets)} sets, {len(info.sections)} sections)")
    except NsightwrapError as e:
        problems += 1
        print(f"ncu: MISSING\n{e}")
    held = gpu.compute_processes()
    if held is None:
        problems += 1
        print("GPU: nvidia-smi not found: no NVIDIA driver here, so nothing can be profiled on this machine.\n"
              "     Run on a machine with an NVIDIA GPU and driver (the tests still run here: `make test`).")
    else:
        print(f"GPU: nvidia-smi works; {len(held)} compute process(es) running")
    return 0 if problems == 0 else USAGE_EXIT_CODE

"""The versions a bug report needs, for `hangs bundle`: GPUs, driver, CUDA, ncu, nsys, compute-sanitizer, the
OS and Python with its packages.

The tools are found as `doctor` finds them (cli.preflight.Facts: ncu located and probed through the run
context, the GPUs through nvidia-smi; nsys by nsys.locate), compute-sanitizer as triage does
(diagnose.sanitizer.find_sanitizer); each version query is one short watched command (watch.locate.run_command,
a few seconds at most). Nothing here raises: a tool that is missing or
fails says so in its entry.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import sys
from typing import Any, Callable, Mapping, Optional

from nsightwrap.cli.preflight import (
    Facts,
    check_driver,
    check_ncu,
    check_ncu_driver,
    check_nsys,
    check_timing,
    run_checks,
)
from nsightwrap.diagnose.sanitizer import find_sanitizer
from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.version import __version__
from nsightwrap.watch.locate import DEFAULT_CUDA_ROOT, run_command, search_tool

__all__ = ["collect_versions"]

#: doctor's checks that run nothing on the GPU (the counter probe and the GPU process list are left out).
_CHECKS = (check_ncu, check_driver, check_ncu_driver, check_nsys, check_timing)
_QUERY_S = 10.0


def _output(argv: list[str], timeout: float = _QUERY_S) -> str:
    try:
        code, out = run_command(argv, timeout=timeout)
    except NsightwrapError as e:
        return f"(failed: {e})"
    return out.strip() if code == 0 else f"(exit code {code}) {out.strip()}"


def _find(tool: str, env: Mapping[str, str], var: str) -> Optional[str]:
    try:
        return search_tool(tool, None, "", var, env, DEFAULT_CUDA_ROOT, (), hint="")
    except NsightwrapError:
        return None


def _sanitizer(env: Mapping[str, str], ncu: Optional[str]) -> Optional[str]:
    """compute-sanitizer as triage finds it (diagnose.sanitizer.find_sanitizer), None when missing."""
    try:
        return find_sanitizer(None, env, ncu=ncu)
    except NsightwrapError:
        return None


def _tool(path: Optional[str], *args: str) -> dict[str, Any]:
    return {"path": path, "version": _output([path, *args]) if path else "not found"}


def _cuda(env: Mapping[str, str]) -> dict[str, Any]:
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    header = _output([smi]) if smi else ""
    found = re.search(r"CUDA Version:\s*([\d.]+)", header)
    nvcc = _find("nvcc", env, "")
    return {"driver_cuda": found.group(1) if found else None,
            "nvcc": _output([nvcc, "--version"]).splitlines()[-1:] if nvcc else "not found"}


def _packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def _os() -> dict[str, Any]:
    pretty = None
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            pretty = next((line.split("=", 1)[1].strip().strip('"') for line in f if line.startswith("PRETTY_NAME=")),
                          None)
    except OSError:
        pass
    u = platform.uname()
    return {"system": u.system, "release": u.release, "version": u.version, "machine": u.machine,
            "distribution": pretty}


def collect_versions(env: Optional[Mapping[str, str]] = None, store: Optional[str] = None,
                     context_of: Optional[Callable[[], RunContext]] = None) -> dict[str, Any]:
    """Everything above as one JSON-able document (doctor's lines included, under ``doctor``)."""
    env = dict(os.environ if env is None else env)
    facts = Facts.gather(context_of or (lambda: RunContext.create(RunConfig(env=env))), store)
    ncu = facts.context.ncu if facts.context else None
    try:
        nsys: Optional[str] = find_nsys(env=env)
    except NsightwrapError:
        nsys = None
    return {
        "nsightwrap": __version__,
        "gpus": [{"name": g.name, "driver": g.driver} for g in facts.gpus or ()],
        "gpus_problem": None if facts.gpus else "nvidia-smi missing, failing or listing no GPU",
        "cuda": _cuda(env),
        "ncu": dict(_tool(ncu, "--version"), probed=facts.context.info.version if facts.context else None,
                    problem=facts.ncu_problem or None),
        "nsys": _tool(nsys, "--version"),
        "compute_sanitizer": _tool(_sanitizer(env, ncu), "--version"),
        "os": _os(),
        "python": {"version": sys.version, "executable": sys.executable, "packages": _packages()},
        "doctor": [c.line() for c in run_checks(facts, _CHECKS)],
    }

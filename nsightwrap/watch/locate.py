"""Find a command-line tool and run it briefly: shared by ncu and nsys.

Knows no profiler: each tool passes its own name, variable, install
patterns and hint to :func:`search_tool`. The install roots more than one
tool searches are defined here, once: CUDA's, and Nsight Compute's (ncu
lives there, and a copy of nsys).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import subprocess
from typing import Callable, Mapping, Optional, Sequence

from nsightwrap.errors import ProgramNotRunnable, ToolError, ToolNotFound

__all__ = ["DEFAULT_CUDA_ROOT", "DEFAULT_NSIGHT_COMPUTE_ROOT", "PROBE_TIMEOUT_S", "Runner", "check_program",
           "run_command", "search_tool"]

DEFAULT_CUDA_ROOT = "/usr/local/cuda"
#: Where Nsight Compute installs its versions (<root>/<version>/ncu, and nsys under host/target-linux-x64).
DEFAULT_NSIGHT_COMPUTE_ROOT = "/opt/nvidia/nsight-compute"

PROBE_TIMEOUT_S = 60.0

Runner = Callable[[Sequence[str]], tuple[int, str]]
"""Runs argv and returns (exit status, merged stdout+stderr); injectable for tests."""


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _check_given(path: str, origin: str, env: Mapping[str, str], tool: str) -> str:
    """A path the user named must work: falling through would hide their typo."""
    expanded = os.path.expanduser(path)
    if os.sep not in expanded and (os.altsep is None or os.altsep not in expanded):
        # A bare name ("ncu-2025") is looked up on PATH like a shell would.
        found = shutil.which(expanded, path=env.get("PATH", ""))
        if found:
            return os.path.abspath(found)
        raise ToolNotFound(
            tool,
            searched=[f"{origin}: {path} (not on PATH)"],
            hint=f"{origin} names {path!r}, which is not on PATH; give a full path to {tool}.",
        )
    if not os.path.exists(expanded):
        problem = "does not exist"
    elif not _is_executable(expanded):
        problem = "is not an executable file"
    else:
        return os.path.abspath(expanded)
    raise ToolNotFound(
        tool,
        searched=[f"{origin}: {path} ({problem})"],
        hint=f"{origin} names {path!r}, which {problem}; fix it or remove it.",
    )


def _newest(pattern: str, version_of: Callable[[str], str]) -> str | None:
    """The executable matching ``pattern`` with the highest version (``version_of`` names it)."""
    found = [p for p in glob.glob(pattern) if _is_executable(p)]
    return os.path.abspath(max(found, key=lambda p: version_key(version_of(p)))) if found else None


def _on_path_or_cuda(tool: str, env: Mapping[str, str], cuda_root: str, searched: list[str]) -> str | None:
    """``PATH``, ``$CUDA_HOME/bin``, ``<cuda_root>/bin``; appends each miss to ``searched``."""
    path_var = env.get("PATH", "")
    found = shutil.which(tool, path=path_var) if path_var else None
    if found:
        return os.path.abspath(found)
    searched.append(f"PATH ({path_var})" if path_var else "PATH (empty)")

    candidates: list[tuple[str, str]] = []
    cuda_home = env.get("CUDA_HOME")
    if cuda_home:
        candidates.append((f"$CUDA_HOME/bin/{tool}", os.path.join(cuda_home, "bin", tool)))
    else:
        searched.append(f"$CUDA_HOME/bin/{tool} (CUDA_HOME not set)")
    candidates.append(("", os.path.join(cuda_root, "bin", tool)))
    for label, candidate in candidates:
        if _is_executable(candidate):
            return os.path.abspath(candidate)
        note = "exists but is not executable" if os.path.exists(candidate) else "missing"
        searched.append(f"{label + ': ' if label else ''}{candidate} ({note})")
    return None


def search_tool(
    tool: str,
    explicit: str | None,
    explicit_origin: str,
    env_var: str,
    env: Mapping[str, str],
    cuda_root: str,
    installs: Sequence[tuple[str, Callable[[str], str]]],
    hint: str,
) -> str:
    """The search order ncu and nsys share: ``explicit``, ``$env_var``, ``PATH``,
    ``$CUDA_HOME/bin``, ``<cuda_root>/bin``, then the newest match of each
    ``(glob pattern, version of a match)`` in ``installs``. ToolNotFound lists
    every place looked at."""
    if explicit:
        return _check_given(explicit, explicit_origin, env, tool)
    if env.get(env_var):
        return _check_given(env[env_var], env_var, env, tool)
    searched: list[str] = []
    found = _on_path_or_cuda(tool, env, cuda_root, searched)
    if found:
        return found
    for pattern, version_of in installs:
        newest = _newest(pattern, version_of)
        if newest:
            return newest
        searched.append(pattern)
    raise ToolNotFound(tool, searched=searched, hint=hint)


def check_program(command: Sequence[str], env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None) -> str:
    """The path of the program `command` starts, as it will be launched; ProgramNotRunnable when it
    is missing (not on env's PATH, no such file) or cannot be executed, so that this is said before
    launching rather than reported as a crash of the program. A relative path is taken from `cwd`."""
    if not command or not command[0]:
        raise ProgramNotRunnable("", "no command given", "Give the program and its arguments, e.g. ./my_app 1024")
    program = command[0]
    env = os.environ if env is None else env
    if os.sep not in program:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found:
            return found
        here = os.path.join(cwd or os.getcwd(), program)
        hint = (f"It is in {os.path.dirname(here)}: run it as ./{program}" if os.path.lexists(here)
                else f"Install it, or give its path (a program in the current folder is ./{program})")
        raise ProgramNotRunnable(program, "not found on PATH", hint)
    path = os.path.join(cwd or os.getcwd(), program)
    problem = _path_problem(path)
    if problem is None:
        return path
    hint = (f"Make it executable (chmod +x {program}), or run it through its interpreter (e.g. `-- python3 "
            f"{program}` or `-- bash {program}`)" if problem.startswith("not executable")
            else "Check the path (relative paths are taken from the folder the program runs in)")
    raise ProgramNotRunnable(program, problem, hint)


def _path_problem(path: str) -> Optional[str]:
    """Why the file at `path` cannot be executed, or None."""
    if not os.path.lexists(path):
        return f"no such file ({os.path.normpath(path)})"
    if not os.path.exists(path):
        return f"a symbolic link to {os.readlink(path)}, which does not exist"
    if os.path.isdir(path):
        return "a folder, not a program"
    if not os.access(path, os.X_OK):
        return f"not executable (mode {stat.filemode(os.stat(path).st_mode)})"
    return None


def run_command(argv: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> tuple[int, str]:
    """Default runner: no shell, stdin closed so a tool can never wait on a terminal."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.output or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        raise ToolError(f"`{' '.join(argv)}` did not finish within {timeout:g} s.\nOutput so far:\n{out}") from exc
    except OSError as exc:
        raise ToolError(f"could not run `{' '.join(argv)}`: {exc}") from exc
    return done.returncode, done.stdout or ""


def version_key(text: str) -> tuple[int, ...]:
    """The numbers in `text`, as a sort key: 2025.10.0 sorts after 2025.3.1 (string order gets it wrong)."""
    return tuple(int(part) for part in re.findall(r"\d+", text))

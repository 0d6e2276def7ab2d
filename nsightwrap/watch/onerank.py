"""The rank wrapper: ``python -m nsightwrap.watch.onerank --rank N --ncu-argv NCU... -- PROGRAM...``.

A launcher starts it on every rank (see :func:`nsightwrap.watch.launchers.wrap_one_rank`).
It reads this process's rank from the launcher's variables and execs
``NCU... PROGRAM...`` on rank N and ``PROGRAM...`` on the others: the same
pid and environment (the run's cookie included), so the watchdog's tree stop
still reaches every rank. Imports nothing heavy: every rank pays for it.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, Sequence

from nsightwrap.errors import OptionsError
from nsightwrap.watch.launchers import RANK_VARS, chosen_rank

USAGE = "usage: python -m nsightwrap.watch.onerank --rank N --ncu-argv NCU [OPTIONS...] -- PROGRAM [ARGS...]"


def plan(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], Optional[str]]:
    """(what this rank execs, a line to say so or None), from the wrapper's arguments and environment."""
    argv = list(argv)
    if len(argv) < 4 or argv[0] != "--rank" or not argv[1].isdigit() or argv[2] != "--ncu-argv" or "--" not in argv:
        raise OptionsError(f"bad arguments {argv[:4]!r}; {USAGE}")
    want = int(argv[1])
    end = argv.index("--")
    prefix, program = argv[3:end], argv[end + 1:]
    if not prefix or not program:
        raise OptionsError(f"give both the profiler's argv and the program; {USAGE}")
    found = chosen_rank(env)
    if found is None:
        raise OptionsError(f"none of {', '.join(RANK_VARS)} is set, so this process cannot tell its rank: start the "
                           "program through torchrun, mpirun/mpiexec or srun, or profile every rank (no --rank)")
    var, rank = found
    if rank != want:
        return program, None
    return [*prefix, *program], f"nsightwrap: rank {rank} ({var}={rank}) runs under the profiler; the others do not\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        command, say = plan(sys.argv[1:] if argv is None else argv, os.environ)
    except OptionsError as e:
        # ==ERROR== so that the watched run lists it among the run's errors.
        sys.stderr.write(f"==ERROR== nsightwrap rank wrapper: {e}\n")
        return 2
    if say:
        sys.stderr.write(say)
        sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"==ERROR== nsightwrap rank wrapper: cannot run {command[0]!r}: {e}\n")
        return 127
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main())

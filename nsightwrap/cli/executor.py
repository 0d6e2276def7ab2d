"""--executor and its options, for the commands whose probes run on a cluster engine (sweep-sections; run
--profile, the walk's independent jobs): one definition of the options and of the spec made of them."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any, Optional

from nsightwrap.cli.common import UsageError
from nsightwrap.errors import OptionsError
from nsightwrap.fallback.spec import EXECUTORS, ExecutorSpec


def add_executor(parser: Any, what: str = "probe", after: str = "the sweep") -> None:
    """Where the `what`s run: here (default), or as jobs of a cluster engine (submitit)."""
    parser.add_argument("--executor", choices=EXECUTORS, metavar="local|slurm",
                        help=f"run each {what} as a job: local (one per local GPU; --jobs N: the first N GPUs) or "
                             f"slurm (a job array, one GPU per {what}); results go to --store")
    parser.add_argument("--slurm-partition", metavar="NAME", help=f"sbatch --partition of the {what}s' jobs")
    parser.add_argument("--slurm-account", metavar="NAME", help=f"sbatch --account of the {what}s' jobs")
    parser.add_argument("--slurm-time", metavar="TIME", help=f"sbatch --time of each {what}'s job (e.g. 30, 1:00:00)")
    parser.add_argument("--slurm-opt", action="append", default=[], metavar="KEY=VALUE",
                        help=f"another sbatch option for the {what}s' jobs (repeatable), e.g. constraint=h100")
    parser.add_argument("--retries", type=int, default=2, metavar="N",
                        help=f"with --executor: a {what} whose job failed or whose GPU kept processes runs again "
                             "elsewhere at most N times (default 2)")
    parser.add_argument("--executor-folder", metavar="DIR",
                        help=f"with --executor: the jobs' files and logs, kept after {after} (Slurm: a folder "
                             f"the nodes share). Default: a folder removed after {after}, under "
                             "~/.cache/nsightwrap/jobs/ for Slurm, under $TMPDIR (else /tmp) for local jobs")


def executor_spec(args: argparse.Namespace, prog: str) -> Optional[ExecutorSpec]:
    """The --executor options as one spec (its `jobs`: --jobs, see jobs_of); the Slurm ones without
    --executor slurm are refused. prog: the command, for the messages (e.g. "nsightwrap sweep-sections")."""
    slurm = [o for o in ("slurm_partition", "slurm_account", "slurm_time", "slurm_opt") if getattr(args, o)]
    if slurm and args.executor != "slurm":
        raise UsageError(f"{prog}: --{slurm[0].replace('_', '-')} needs --executor slurm")
    if args.executor is None:
        return None
    pairs = []
    for opt in args.slurm_opt:
        key, eq, value = opt.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{prog}: --slurm-opt {opt!r} is not KEY=VALUE (e.g. --slurm-opt constraint=h100)")
        pairs.append((key.strip().lstrip("-").replace("-", "_"), value))
    try:
        spec = ExecutorSpec(args.executor, args.slurm_partition, args.slurm_account, args.slurm_time, tuple(pairs),
                            args.retries, args.executor_folder)
        return replace(spec, jobs=max(0, jobs_of(args)))
    except OptionsError as e:
        raise UsageError(f"{prog}: {e}") from None


def jobs_of(args: argparse.Namespace) -> int:
    """--jobs, else 1 (0 with --executor local: one probe per GPU, on every GPU)."""
    if args.jobs is not None:
        return args.jobs
    return 0 if args.executor == "local" else 1

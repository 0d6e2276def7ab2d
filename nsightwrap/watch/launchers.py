"""Multi-process launches (torchrun, mpirun/mpiexec, srun): read them, and rewrite one so that a
wrapper prefix (ncu's argv) runs around one rank only.

ncu serialises kernel launches across the processes it profiles, so a
collective whose other half runs in another profiled rank never starts (FACTS,
"Multi-process programs"). Wrapping one rank alone avoids that: the launcher
starts `<python> -m nsightwrap.watch.onerank --rank N --ncu-argv ... -- PROGRAM`
on every rank, and that wrapper execs ncu on the chosen rank and the plain
program on the others. Everything here is pure (list in, list out) except
:func:`launcher_python`, which reads a script's first line. Knows no ncu:
the prefix is any argv.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from nsightwrap.errors import OptionsError

__all__ = ["Launch", "RANK_VARS", "WRAPPER_MODULE", "chosen_rank", "launcher_python", "one_rank_argv",
           "one_rank_launch", "parse_launch", "second_run_env", "wrap_one_rank"]

#: The module each rank runs (`python -m ...`): see nsightwrap.watch.onerank.
WRAPPER_MODULE = "nsightwrap.watch.onerank"
#: Where launchers put a process's rank, most global first (torchrun, Open MPI, MPICH/Intel MPI, PMIx, Slurm).
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "LOCAL_RANK")

_TORCHRUN_MODULES = ("torch.distributed.run",)
_MPI_NAMES = ("mpirun", "mpiexec", "orterun", "prterun")


def _names(*groups: str) -> frozenset[str]:
    return frozenset(n for g in groups for n in g.split())


# Options of each launcher: those taking one value, two values, or none. An option not listed
# makes the split fail (the rewrite is refused, saying which option), never guess.
_TORCHRUN = {
    1: _names("--nnodes --nproc-per-node --nproc_per_node --rdzv-backend --rdzv_backend --rdzv-endpoint",
              "--rdzv_endpoint --rdzv-id --rdzv_id --rdzv-conf --rdzv_conf --max-restarts --max_restarts",
              "--monitor-interval --monitor_interval --start-method --start_method --event-log-handler",
              "--event_log_handler --role --log-dir --log_dir -r --redirects -t --tee --local-ranks-filter",
              "--local_ranks_filter --node-rank --node_rank --master-addr --master_addr --master-port",
              "--master_port --local-addr --local_addr --logs-specs --logs_specs --numa-binding --numa_binding",
              "--signals-to-handle --signals_to_handle"),
    0: _names("--standalone -m --module --no-python --no_python --run-path --run_path"),
}
_MPI = {
    1: _names("-np -n --np --n -c -N --npernode -npernode -npersocket --npersocket -ppn -perhost -H -host",
              "--host -hosts --hostfile -hostfile --machinefile -machinefile -f --default-hostfile -x --map-by",
              "-map-by --rank-by -rank-by --bind-to -bind-to -wdir --wdir -wd --prefix --preload-files",
              "--output-filename -output-filename --output --path --timeout --launch-agent --personality",
              "--cpus-per-proc --cpus-per-rank -genvlist -envlist -launcher -bootstrap -iface -rmk -configfile",
              "-am --am --tune"),
    2: _names("--mca -mca --gmca -gmca --prtemca --pmixmca -genv -env"),
    0: _names("--oversubscribe -oversubscribe --allow-run-as-root --tag-output -tag-output --timestamp-output",
              "--report-bindings -report-bindings --display-map -display-map -q --quiet -v --verbose",
              "--merge-stderr-to-stdout --use-hwthread-cpus --bynode -bynode --byslot -byslot --noprefix",
              "--enable-recovery --xml -genvall -genvnone -envall -envnone -l -prepend-rank"),
}
_SRUN = {
    1: _names("-A --account -b --begin -c --cpus-per-task -C --constraint -d --dependency -D --chdir -e",
              "--error -G --gpus -i --input -J --job-name -L --licenses -m --distribution -n --ntasks -N",
              "--nodes -o --output -p --partition -q --qos -r --relative -S --core-spec -t --time -T",
              "--threads -w --nodelist -W --wait -x --exclude --ntasks-per-node --gpus-per-node",
              "--gpus-per-task --gpus-per-socket --cpus-per-gpu --mem --mem-per-cpu --mem-per-gpu --gres",
              "--export --mpi --cpu-bind --reservation --het-group --nice --signal --comment"),
    0: _names("-E --preserve-env -h --help -H --hold -k --no-kill -K -l --label -O --overcommit -Q --quiet",
              "-s --oversubscribe -u --unbuffered -v --verbose -X --disable-status -Z --no-allocate",
              "--exclusive --overlap --pty --multi-prog --test-only"),
}


@dataclass(frozen=True)
class Launch:
    """A command line read as a multi-process launch.

    ``launcher`` is the launcher and its own options as given (torchrun's
    -m/--no-python/--run-path and any `--` left out: the rewrite says how
    the program starts), ``program`` what each rank runs, ``mode`` how
    torchrun starts it ("script": python SCRIPT, "module": python -m MOD,
    "exec": the program itself). ``problem`` says why the command cannot be
    split (an option this module does not know); the counts are None when
    the command does not say them.
    """

    kind: str  # "torchrun", "mpirun" or "srun"
    launcher: tuple[str, ...]
    program: tuple[str, ...]
    processes: Optional[int] = None
    local_processes: Optional[int] = None
    mode: str = "exec"
    python: Optional[str] = None  # the interpreter of `python -m torch.distributed.run`
    separator: bool = False  # the program came after `--`
    problem: Optional[str] = None

    def describe(self) -> str:
        n = "?" if self.processes is None else str(self.processes)
        return f"{self.kind} job of {n} process(es)"


def _launcher_kind(command: Sequence[str]) -> tuple[Optional[str], int]:
    """(kind, index of its first own option), or (None, 0) for a command that is no launcher."""
    if not command:
        return None, 0
    base = os.path.basename(command[0])
    stem = base.split(".")[0]
    if base == "torchrun":
        return "torchrun", 1
    if stem in _MPI_NAMES:
        return "mpirun", 1
    if base == "srun":
        return "srun", 1
    if stem.startswith("python") and len(command) >= 3 and command[1] == "-m" and command[2] in _TORCHRUN_MODULES:
        return "torchrun", 3
    return None, 0


def _split(kind: str, args: Sequence[str]) -> tuple[dict[str, str], list[str], list[str], bool, Optional[str]]:
    """(options by name, the launcher's words, the program, after `--`, problem) of a launcher's arguments."""
    table = {"torchrun": _TORCHRUN, "mpirun": _MPI, "srun": _SRUN}[kind]
    opts: dict[str, str] = {}
    words: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return opts, words, list(args[i + 1:]), True, None
        if not a.startswith("-") or a == "-":
            return opts, words, list(args[i:]), False, None
        name, eq, value = a.partition("=")
        width = next((w for w, names in table.items() if name in names), None)
        if width is None and kind == "srun" and not a.startswith("--") and a[:2] in table[1]:
            name, eq, value = a[:2], "=", a[2:]  # -n4
            width = 1
        if width is None:
            return opts, words, [], False, (f"{kind} option {name!r} is not one nsightwrap knows, so it cannot tell "
                                            f"where the program starts; write it as {name}=VALUE if it takes a value")
        if eq or width == 0:
            opts[name] = value if eq else ""
            words.append(a)
            i += 1
            continue
        if i + width >= len(args):
            return opts, words, [], False, f"{kind} option {name!r} lacks its value"
        opts[name] = args[i + 1]
        words += args[i:i + 1 + width]
        i += 1 + width
    return opts, words, [], False, f"no program to run in this {kind} command"


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and text.strip().isdigit() else None


def _first(opts: Mapping[str, str], *names: str) -> Optional[str]:
    return next((opts[n] for n in names if n in opts), None)


def _counts(kind: str, opts: Mapping[str, str]) -> tuple[Optional[int], Optional[int]]:
    """(processes, processes on this node) that the launcher's options say."""
    if kind == "torchrun":
        local = _int(_first(opts, "--nproc-per-node", "--nproc_per_node") or "1")
        low, _, high = (_first(opts, "--nnodes") or "1").partition(":")
        nodes = _int(low) if not high or high == low else None
        return (local * nodes if local and nodes else None), local
    if kind == "mpirun":
        total = _int(_first(opts, "-np", "-n", "--np", "--n", "-c"))
        per_node = _int(_first(opts, "-N", "--npernode", "-npernode", "-ppn", "-perhost"))
        hosts = any(n in opts for n in ("-H", "-host", "--host", "-hosts", "--hostfile", "-hostfile",
                                        "--machinefile", "-machinefile", "-f"))
        return total, per_node or (None if hosts else total)
    total = _int(_first(opts, "-n", "--ntasks"))
    per_node = _int(_first(opts, "--ntasks-per-node"))
    nodes = _int(_first(opts, "-N", "--nodes"))
    if total is None and per_node and nodes:
        total = per_node * nodes
    if per_node is None and total is not None:
        per_node = total if nodes in (None, 1) else max(1, total // nodes)
    return total, per_node


def parse_launch(command: Sequence[str]) -> Optional[Launch]:
    """The launch `command` describes, or None when it starts no launcher nsightwrap knows."""
    kind, start = _launcher_kind(command)
    if kind is None:
        return None
    opts, words, program, separator, problem = _split(kind, command[start:])
    processes, local = _counts(kind, opts)
    mode, python = "exec", None
    if kind == "torchrun":
        # torchrun: --run-path wins over --no-python; either way the program then runs as below.
        mode = ("script" if any(n in opts for n in ("--run-path", "--run_path")) else
                "exec" if any(n in opts for n in ("--no-python", "--no_python")) else
                "module" if any(n in opts for n in ("-m", "--module")) else "script")
        words = [w for w in words if w.partition("=")[0] not in _TORCHRUN[0] - {"--standalone"}]
        python = command[0] if start == 3 else None
    return Launch(kind, (*command[:start], *words), tuple(program), processes, local, mode, python, separator,
                  problem)


def _check(launch: Launch, rank: int) -> None:
    if launch.problem:
        raise OptionsError(f"cannot profile one rank of this {launch.kind} command: {launch.problem}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise OptionsError(f"rank={rank!r} must be a whole number >= 0 (the rank to profile)")
    if launch.processes is not None and rank >= launch.processes:
        raise OptionsError(f"rank {rank} is not in this {launch.describe()}: choose 0..{launch.processes - 1}")


def wrap_one_rank(launch: Launch, prefix: Sequence[str], rank: int, *, python: str, wrapper_python: str) -> list[str]:
    """The launch rewritten so that `prefix` (ncu and its options) runs around rank `rank` only.

    `python` runs the program where torchrun would have run it with Python
    (script or -m); `wrapper_python` runs nsightwrap's wrapper on every rank.
    """
    _check(launch, rank)
    if "--" in prefix:
        raise OptionsError("the profiler's options hold a bare `--`, which would end them early in the rank wrapper")
    wrapper = [wrapper_python, "-m", WRAPPER_MODULE, "--rank", str(rank), "--ncu-argv", *prefix, "--"]
    sep = ["--"] if launch.separator else []
    if launch.kind != "torchrun":
        return [*launch.launcher, *sep, *wrapper, *launch.program]
    run = {"script": [python, "-u", *launch.program], "module": [python, "-u", "-m", *launch.program],
           "exec": list(launch.program)}[launch.mode]
    return [*launch.launcher, "--no-python", *sep, *wrapper, *run]


def launcher_python(launch: Launch, default: str) -> str:
    """The Python that torchrun would run the program with: its own interpreter (`#!` line), else `default`."""
    if launch.python:
        return launch.python
    if launch.kind != "torchrun":
        return default
    path = launch.launcher[0]
    if os.sep not in path:
        path = shutil.which(path) or path
    try:
        with open(path, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return default
    words = first[2:].split() if first.startswith("#!") else []
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        words = words[1:]
    return words[0] if words and "python" in os.path.basename(words[0]) else default


def chosen_rank(env: Mapping[str, str]) -> Optional[tuple[str, int]]:
    """(variable, rank) of this process, from the first of RANK_VARS that is set."""
    for var in RANK_VARS:
        value = env.get(var, "").strip()
        if value.isdigit():
            return var, int(value)
    return None


def one_rank_launch(command: Sequence[str], rank: int) -> Launch:
    """The launch of `command`, whose rank `rank` ncu can wrap alone; else OptionsError says why not."""
    launch = parse_launch(command)
    if launch is None:
        raise OptionsError(f"rank={rank} profiles one rank of a multi-process launch, but {command[0]!r} is none "
                           "nsightwrap knows (torchrun, python -m torch.distributed.run, mpirun/mpiexec, srun): "
                           "start the program through one of them, or drop rank to profile the whole program")
    _check(launch, rank)
    return launch


def one_rank_argv(command: Sequence[str], argv: Sequence[str], rank: int, wrapper_python: str) -> list[str]:
    """`argv` (a profiler's prefix, then `command`) rewritten so that the prefix wraps rank `rank` alone."""
    command = list(command)
    launch = one_rank_launch(command, rank)
    prefix = list(argv[: len(argv) - len(command)])
    return wrap_one_rank(launch, prefix, rank, python=launcher_python(launch, wrapper_python),
                         wrapper_python=wrapper_python)


#: torchrun's options (and their PET_ variables) that fix where its ranks meet: a second run of the job would
#: meet the first one's ranks there. --nnodes is one of them unless it says one node.
_MEETING = _names("--master-port --master_port --master-addr --master_addr --rdzv-endpoint --rdzv_endpoint",
                  "--rdzv-backend --rdzv_backend --rdzv-id --rdzv_id --node-rank --node_rank --local-addr --local_addr")
_MEETING_VARS = ("PET_MASTER_ADDR", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_NNODES", "PET_NODE_RANK",
                 "NCCL_COMM_ID")  # the last: NCCL's own bootstrap address, the same for both runs


def second_run_env(command: Sequence[str], env: Mapping[str, str]) -> tuple[Optional[dict[str, str]], str]:
    """(variables, why) for a second run of a launch while the first one runs, on the same node: torchrun takes
    its rendezvous port from PET_MASTER_PORT unless its command line gives one, so each run gets a free port of
    its own. None (and why not) where nsightwrap cannot keep the two runs' ranks apart: not torchrun, several
    nodes, or the command or the environment fixes where the ranks meet (a program that fixes it itself, e.g.
    init_method="tcp://...:PORT", is not seen here: its second run fails to meet, or meets the first one's; so
    does torchrun --standalone before PyTorch 2.1, which meets on localhost:29400 whatever PET_MASTER_PORT says:
    nsightwrap.fallback.sidebyside then makes the run that failed again alone)."""
    kind, start = _launcher_kind(command)
    if kind != "torchrun":
        return None, ("only torchrun's ranks can be given a meeting place of their own" if kind else
                      "no launcher nsightwrap knows starts the program")
    opts, _, _, _, problem = _split(kind, command[start:])
    if problem:
        return None, problem
    fixed = sorted(n for n in opts if n in _MEETING)
    nodes = opts.get("--nnodes", "1").partition(":")
    if nodes[0] != "1" or nodes[2] not in ("", "1"):
        fixed.append(f"--nnodes {opts['--nnodes']}")
    fixed += [v for v in _MEETING_VARS if env.get(v)]
    if fixed:
        return None, f"the job says where its ranks meet ({', '.join(fixed)}), so a second run would meet there too"
    return meeting_apart(), "torchrun's rendezvous on a port of its own"


def meeting_apart() -> dict[str, str]:
    """The variables of one more run of a torchrun job that second_run_env allows: a free rendezvous port."""
    return {"PET_MASTER_PORT": str(free_port())}


def free_port() -> int:
    """A TCP port of this machine that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

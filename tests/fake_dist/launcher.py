"""Fake torchrun (and, named mpirun, a fake mpirun): starts N ranks of a program, as the real launchers do.

torchrun: `torchrun [--standalone] [--nnodes N] --nproc-per-node N [-m | --no-python] PROGRAM ARGS...`;
each rank gets LOCAL_RANK, RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT and the launcher's own
environment (torchrun passes os.environ down), and runs `python -u PROGRAM` unless --no-python.
mpirun: `mpirun -np N PROGRAM ARGS...`; ranks get OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK.
Both set FAKE_DIST_DIR, a folder where the fake collectives of tests/fake_ncu/fakecuda.py meet.
When a rank fails, the others are stopped (SIGTERM) and the launcher exits 1, like torchrun;
SIGINT/SIGTERM to the launcher are passed to the ranks.
With FAKE_DIST_PORTS=1, torchrun listens on its rendezvous port while the job runs, as the real one's c10d store
does: --master-port, else $PET_MASTER_PORT (torchrun reads each option from its PET_ variable), else 29500;
--standalone takes a free one. A port already in use ends the launch with the real error (EADDRINUSE), exit 1.

The code is here, imported by the stubs `torchrun` and `mpirun` (its bytecode is cached). It imports only what a
`python -S` has loaded already: subprocess, tempfile, shutil, socket and signal (enum) cost ~20 ms of CPU a run on
the 2-core machine; the ranks start as subprocess.Popen started them (PATH lookup, fds above 2 closed, SIGPIPE and
SIGXFSZ reset), by os.posix_spawnp.
"""
import _signal as signal  # signal.py imports enum; _signal has what is used here
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_ncu"))
from lean import make_folder, remove_folder  # noqa: E402  (tests/fake_ncu/lean.py: shutil/tempfile without them)

VALUE = {"--nnodes", "--nproc-per-node", "--nproc_per_node", "--master-port", "--master_port", "--master-addr",
         "--master_addr", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--max-restarts", "--monitor-interval",
         "-np", "-n", "-x"}
FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python", "--oversubscribe"}


class Rank:
    """One rank's process: what the launcher used of subprocess.Popen."""

    def __init__(self, argv, env):
        fds = [int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2]
        close = [(os.POSIX_SPAWN_CLOSE, fd) for fd in fds if _inheritable(fd)]
        self.pid = os.posix_spawnp(argv[0], argv, env, file_actions=close,
                                   setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        self.returncode = None

    def _reaped(self, status):
        self.returncode = os.waitstatus_to_exitcode(status)

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
        return self.returncode

    def wait(self, timeout=None):
        """The exit status; with a timeout, None when the rank still runs after it."""
        if timeout is None:
            if self.returncode is None:
                self._reaped(os.waitpid(self.pid, 0)[1])
            return self.returncode
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _inheritable(fd):
    try:
        return os.get_inheritable(fd)
    except OSError:  # listdir's own fd, closed since
        return False


def parse(args):
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        if name == "--":
            i += 1
            break
        if name in FLAGS:
            opts[name] = True
            i += 1
        elif name in VALUE:
            opts[name] = value if eq else args[i + 1]
            i += 1 if eq else 2
        else:
            sys.exit(f"fake launcher: unknown option {name}")
    return opts, args[i:]


def rank_env(mpi, rank, world, folder, port=29500):
    if mpi:
        extra = {"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": world, "OMPI_COMM_WORLD_LOCAL_RANK": rank}
    else:
        extra = {"LOCAL_RANK": rank, "RANK": rank, "GROUP_RANK": 0, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": world,
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    return dict(os.environ, FAKE_DIST_DIR=folder, **{k: str(v) for k, v in extra.items()})


def rendezvous(opts):
    """(the socket torchrun's store listens on, or None, port): see the module docstring."""
    port = 0 if opts.get("--standalone") else int(opts.get("--master-port") or opts.get("--master_port")
                                                   or os.environ.get("PET_MASTER_PORT") or 29500)
    if os.environ.get("FAKE_DIST_PORTS") != "1":
        return None, port or 29500
    import socket

    store = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        store.bind(("127.0.0.1", port))
    except OSError:
        sys.stderr.write("torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                         f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: "
                         "address already in use\n")
        sys.exit(1)
    store.listen()
    return store, store.getsockname()[1]


def main():
    mpi = os.path.basename(sys.argv[0]) == "mpirun"
    opts, program = parse(sys.argv[1:])
    if not program:
        sys.exit("fake launcher: no program")
    store, port = (None, 29500) if mpi else rendezvous(opts)
    world = int(opts.get("-np") or opts.get("-n") or opts.get("--nproc-per-node") or opts.get("--nproc_per_node") or 1)
    if not mpi and not (opts.get("--no-python") or opts.get("--no_python")):
        program = [sys.executable, "-u", *(["-m"] if opts.get("-m") or opts.get("--module") else []), *program]
    folder = make_folder("fake-dist-")
    ranks = []

    def stop(signum, frame):
        for p in ranks:
            if p.poll() is None:
                p.send_signal(signum)
        for p in ranks:
            if p.wait(timeout=3) is None:
                p.kill()
        remove_folder(folder)
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    ranks.extend(Rank(program, rank_env(mpi, r, world, folder, port)) for r in range(world))
    rc = 0
    while any(p.poll() is None for p in ranks):
        failed = [p for p in ranks if p.returncode not in (None, 0)]
        if failed:  # torchrun stops the whole group when one worker fails
            rc = 1
            for p in ranks:
                if p.poll() is None:
                    p.terminate()
            break
        pid, status = os.waitpid(-1, 0)  # the next rank to end (no other children), instead of polling
        for p in ranks:
            if p.pid == pid:
                p._reaped(status)
    for p in ranks:
        p.wait()
        rc = rc or (1 if p.returncode else 0)
    remove_folder(folder)
    if store is not None:
        store.close()
    return rc

"""Fake Nsight Compute front end, faithful to what ncu 2025.3.1 did on the GPU machine.

What it copies from the real tool (tests/data/gpu-transcripts, FACTS.md):
- `--version`, `--list-sets`, `--list-sections` print the real text;
- option errors are printed at once with rc 1 (range replay with kernel-name,
  import-source or profile-from-start; unknown section or set; an existing
  export file without -f);
- it escapes the launcher's process group (setsid) and runs the target
  under a TreeLauncherSubreaper, so killing the started pid or its group
  leaves the profiler and the target running;
- the target prints the progress pieces itself, without newlines (see
  fakecuda.py), and a hanging kernel leaves `0%..` open, then the 3 s warning;
- the report is written after each finished kernel (a partial report exists
  while a later kernel hangs); SIGINT (and the second SIGTERM) shut the
  target down, print the errors the real tool printed, the report line, and
  exit 9; the first SIGTERM is ignored (harder than the real tool).

`--log-file PATH` is honoured as the real tool does it (FACTS.md, "Program
output and ncu's own output"): PATH is truncated at start and every message
of ncu's (headers, each progress mark, warnings, errors, the report line,
the results page) goes there in the same small pieces, while the program's
own output stays on stdout. A replayed transcript is split the same way
(ncutext.py tells ncu's pieces from the program's lines).

Knobs for tests (environment): FAKE_NCU_SCALE multiplies every delay
(default 1.0); FAKE_NCU_WEDGED=1 makes it ignore SIGINT and SIGTERM;
FAKE_NCU_IGNORE_SIGNALS=N makes it ignore the first N of them (default: the
first SIGTERM only).
FAKE_NCU_STUCK=wedge|stop: once the program has ended (its `Disconnected`
printed), the front end hangs (wedge: it still shuts down on SIGINT, as
above) or stops itself with SIGSTOP (stop: it acts on signals only once
continued); the issue 23 audit saw both leave nsightwrap waiting for ever.
FAKE_NCU_NO_REPORT=1 profiles but writes no report (a disk that filled up);
FAKE_NCU_CTRPERM=1 answers as ncu does for a user who may not read the GPU's
performance counters (ERR_NVGPUCTRPERM, then "No kernels were profiled").
"""
# Run by the stub tests/fake_ncu/target/ncu (which names the process `ncu`), imported so that its bytecode is
# cached: compiled as a script it cost 4 ms of every one of the suite's ~1,000 runs of the fake.
# It imports only modules that a `python -S` has loaded already (or that are frozen): json, re, subprocess, shutil,
# tempfile, threading and signal (enum) cost 20 ms of CPU on the 2-core machine, twice the interpreter's start,
# in each of the suite's ~1,000 runs. json and re are imported only where a path needs them; the state this
# front end shares with its TreeLauncherSubreaper and the program (FAKE_NCU_SESSION, the state folder's files)
# is written as Python literals (see fakecuda.py).
import _signal as signal  # signal.py imports enum; _signal has what is used here (signal, SIG*, SIG_IGN)
import _thread
import os
import sys
import time

from lean import copyfile, literal, make_folder, remove_folder, which  # beside this module: the stub put it on sys.path

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "target")  # the fake install's folder
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "data"))
SCALE = float(os.environ.get("FAKE_NCU_SCALE", "1.0"))

VERSION = """NVIDIA (R) Nsight Compute Command Line Profiler
Copyright (c) 2018-2025 NVIDIA Corporation
Version 2025.3.1.0 (build 36398880) (public-release)
"""

#: Collections that take one pass (FACTS, "Multi-process programs": the all-reduce profiled on one rank).
SINGLE_PASS_SECTIONS = {"LaunchStats"}
SINGLE_PASS_METRICS = {"gpu__time_duration.sum"}
PASSES = {"basic": 10, "detailed": 20, "full": 38, "roofline": 16, "nvlink": 4, "pmsampling": 12}

# Options that take a value (long names; short aliases map to them).
SHORT = {"-o": "--export", "-k": "--kernel-name", "-c": "--launch-count", "-s": "--launch-skip",
         "-f": "--force-overwrite", "-v": "--version", "-h": "--help", "-i": "--import"}
FLAGS = {"--force-overwrite", "--version", "--help", "--list-sets", "--list-sections", "--nvtx",
         "--quiet", "--verbose", "--null-stdin", "--disable-extra-suffixes", "--forward-signals",
         "--disable-profiler-start-stop", "--csv", "--print-summary-per-gpu", "--list-metrics",
         "--query-metrics"}


#: The state folder's file of finished kernels: one line each, a dict written by fakecuda._record.
DONE = "done.txt"
#: ... and the FIFO on which fakecuda._record wakes the front end's report thread after each line.
WAKE = "done.fifo"

# Where ncu's own messages go: stdout, or the --log-file.
CHANNEL = {"fd": 1}


def out(text):
    os.write(CHANNEL["fd"], text.encode())


def open_log(path):
    """`--log-file`: "stdout", "stderr", or a file that is overwritten."""
    if path in ("stdout", "stderr"):
        CHANNEL["fd"] = 1 if path == "stdout" else 2
        return None
    CHANNEL["fd"] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    return path


def parse_args(argv):
    """Split ncu options from the target command, as ncu does: the first non-option word starts the program."""
    opts, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            break
        name, _, inline = a.partition("=")
        name = SHORT.get(name, name)
        if name in FLAGS:
            opts.setdefault(name, []).append(True)
            i += 1
            continue
        if inline:
            value = inline
            i += 1
        else:
            if i + 1 >= len(argv):
                out(f"==ERROR== the required argument for option '{name}' is missing\n")
                sys.exit(1)
            value = argv[i + 1]
            i += 2
        opts.setdefault(name, []).append(value)
    return opts, argv[i:]


class Subreaper:
    """The TreeLauncherSubreaper between the front end and the program (FACTS.md: ncu -> ncu ->
    TreeLauncherSubreaper -> target): a child of the front end (forked, not a new interpreter: a third of a
    fake run's CPU) named TreeLauncherSub (the real one's comm) that starts the program, writes its pid to the
    state folder, announces it, waits for it and exits with its status. It has the default SIGINT and SIGTERM
    dispositions, and starts the program as subprocess.Popen did (PATH lookup, fds above 2 closed, SIGPIPE and
    SIGXFSZ reset to default). The front end's report thread runs when it forks (Python 3.12 warns about that, a
DeprecationWarning ignored outside __main__): the child takes no lock that thread may hold (fork resets the GIL and
the import lock; it opens its own files and writes with os.write) and soon execs or exits."""

    def __init__(self, state, command, session):
        self.returncode = None
        caught = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, caught)  # no front-end handler may run in the child
        try:
            self.pid = os.fork()
            if self.pid == 0:
                try:
                    for sig in caught:
                        signal.signal(sig, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
                    os._exit(self._run(state, command, session))
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(1)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)

    @staticmethod
    def _run(state, command, session):
        with open("/proc/self/comm", "w") as comm:
            comm.write("TreeLauncherSub")
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        log = session.get("log")
        # ncu's messages go to its --log-file when it has one, else to stdout.
        channel = os.open(log, os.O_WRONLY | os.O_APPEND) if log else 1
        # A launcher (tests/fake_dist) uses no CUDA, so ncu never connects to it; its ranks announce themselves.
        launcher = os.path.basename(command[0]) in ("torchrun", "mpirun", "srun")
        env = dict(os.environ, FAKE_NCU_SESSION=repr(session), FAKE_NCU_SUBREAPER=str(os.getpid()))
        try:
            if launcher:
                pid = os.posix_spawnp(command[0], command, env, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
            else:
                pid, go, exe = _gated(command, env, channel)
        except OSError as e:
            os.write(channel, f"==ERROR== Failed to launch the application: {e}\n".encode())
            return 1
        with open(os.path.join(state, "target_pid"), "w") as f:
            f.write(str(pid))
        if not launcher:
            if os.environ.get("FAKE_NCU_CONNECT_DELAY"):  # a launcher descheduled before it says "Connected"
                time.sleep(float(os.environ["FAKE_NCU_CONNECT_DELAY"]))
            os.write(channel, f"==PROF== Connected to process {pid} ({exe})\n".encode())
            try:
                os.write(go, b".")
            except OSError:
                pass  # the program is gone already
            os.close(go)
        rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if rc >= 0 and not launcher:  # a target killed by the profiler's shutdown is not announced
            os.write(channel, f"==PROF== Disconnected from process {pid}\n".encode())
        return rc if rc >= 0 else 128 - rc

    def poll(self):
        """As Popen.poll: None while it runs, and also while wait() is reaping it (a signal handler that runs
        between wait()'s waitpid and its return: Popen's poll then finds its lock held)."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _gated(command, env, channel):
    """The program started as posix_spawnp starts it, but held before its exec until the launcher writes a byte to
    the returned descriptor, once it has said "Connected": nothing of the program runs before that line, as with the
    real injection, which holds the process until ncu has accepted it. (Held only after it began, a program that
    writes at once, not through fakecuda, had its first bytes before "Connected" under load.) A launcher that dies
    first (end of file) starts nothing. A program that is not there or not runnable is refused before anything is
    said, as posix_spawnp refused it; an exec that fails later (not an executable file) follows "Connected", where
    the real ncu says only that it failed. (pid, descriptor, the program's file as ncu names it)."""
    found = which(command[0])
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", command[0])
    hold, go = os.pipe()
    pid = os.fork()
    if pid:
        os.close(hold)
        return pid, go, os.path.realpath(found)
    try:
        os.close(go)
        with open("/proc/self/comm", "w") as comm:  # the program's name while held, not the launcher's
            comm.write(os.path.basename(command[0])[:15])
        if os.read(hold, 1):
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            os.execvpe(command[0], command, env)
    except OSError as e:
        os.write(channel, f"==ERROR== Failed to launch the application: {e}\n".encode())
    finally:
        os._exit(1)


def read_table(name):
    with open(os.path.join(DATA, "ncu", name)) as f:
        return f.read()


def known_sections_and_sets():
    """Identifiers from the real list outputs (first column, wrapped rows joined)."""
    sections = []
    for line in read_table("list_sections.txt").splitlines()[3:]:
        ident = line[:44].strip()
        if ident:
            sections.append(ident)
    sets = {}
    current = None
    for line in read_table("list_sets.txt").splitlines()[3:]:
        ident, cell = line[:10].strip(), line[11:86]
        if ident:
            current = ident
            sets[current] = cell
        elif current:
            sets[current] += cell
    return sections, {k: [s.strip() for s in v.split(",") if s.strip()] for k, v in sets.items()}


def fail(msg, rc=1):
    out(msg)
    sys.exit(rc)


def validate(opts):
    replay = opts.get("--replay-mode", ["kernel"])[-1]
    if replay in ("range", "app-range"):
        for opt in ("--kernel-name", "--import-source", "--profile-from-start", "--kernel-id"):
            if opt in opts:
                fail(f"==ERROR== Option {opt[2:]} is not supported during range replay.\n")
    sections, sets = known_sections_and_sets()
    for s in opts.get("--section", []):
        if s.startswith("regex:"):
            import re

            if not any(re.search(s[6:], x) for x in sections):
                fail(f"==ERROR== Option '--section {s}' did not match any section.\n"
                     "==ERROR== Use --list-sections to see the list of available sections.\n")
        elif s not in sections:
            fail(f"==ERROR== Option '--section {s}' did not match any section.\n"
                 "==ERROR== Use --list-sections to see the list of available sections.\n")
    for s in opts.get("--set", []):
        if s not in sets:
            fail(f"==ERROR== Option '--set {s}' did not match any section set.\n"
                 "==ERROR== Use --list-sets to see the list of available section sets.\n")
    collected = set()
    for s in opts.get("--set", []) or ([] if (opts.get("--section") or opts.get("--metrics")) else ["basic"]):
        collected.update(sets[s])
    for s in opts.get("--section", []):
        collected.update([x for x in sections if re.search(s[6:], x)] if s.startswith("regex:") else [s])
    return replay, sorted(collected), sets


def pass_count(opts, collected, sets):
    metrics = ",".join(opts.get("--metrics", [])).split(",") if opts.get("--metrics") else []
    if opts.get("--set"):
        return PASSES.get(opts["--set"][-1], 10)
    if set(collected) <= SINGLE_PASS_SECTIONS and set(metrics) <= SINGLE_PASS_METRICS and (collected or metrics):
        return 1
    if collected:
        return max(1, min(38, 2 * len(collected) + 2))
    if metrics == ["gpu__time_duration.sum"]:
        return 1
    return max(1, len(metrics))


def replay_transcript(path, export):
    """Print a recorded transcript with its own timing (scaled): the real tool's bytes.

    Where the recording ends in a kill, the replay hangs until it is stopped;
    SIGINT then does what the real front end did.
    """
    import json

    import ncutext  # beside this module: the stub put this folder on sys.path

    os.setsid()

    def shutdown(signum, frame):
        out("==PROF== Trying to shutdown target application\n"
            "==ERROR== The application returned an error code (9).\n")
        if export:
            copyfile(os.path.join(DATA, "reports", "partial_mixed_basic.ncu-rep"), export)
            out(f"==PROF== Report: {os.path.abspath(export)}\n")
        os._exit(9)

    signal.signal(signal.SIGINT, shutdown)
    start = time.monotonic()
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    whole = "".join(r.get("out", "") for r in records)
    spans = ncutext.atoms(whole)
    at = 0
    written = False
    for rec in records:
        if "out" in rec:
            time.sleep(max(0.0, start + rec["t"] * SCALE - time.monotonic()))
            text = rec["out"]
            at += len(text)
            if export and text.startswith("==PROF== Report:"):
                copyfile(os.path.join(DATA, "reports", "basic_ok.ncu-rep"), export)
                out(f"==PROF== Report: {os.path.abspath(export)}\n")
                written = True
                continue
            for kind, piece in ncutext.split_chunk(whole, spans, at - len(text), at):
                if kind == "ncu":
                    out(piece)
                else:
                    os.write(1, piece.encode())  # the program's own output
        elif rec.get("status") == "exited":
            profiled = any("==PROF== Profiling" in r.get("out", "") for r in records)
            if export and not written and rec["rc"] == 0 and profiled:
                # Recorded without -o: with it, ncu writes the report instead of printing tables.
                copyfile(os.path.join(DATA, "reports", "basic_ok.ncu-rep"), export)
                out(f"==PROF== Report: {os.path.abspath(export)}\n")
            return rec["rc"]
        else:
            break
    while True:  # the recording ended in a hang
        time.sleep(3600)


def main():
    opts, command = parse_args(sys.argv[1:])
    if "--version" in opts:
        out(VERSION)
        return 0
    if "--list-sets" in opts:
        out(read_table("list_sets.txt"))
        return 0
    if "--list-sections" in opts:
        out(read_table("list_sections.txt"))
        return 0
    log = open_log(opts["--log-file"][-1]) if "--log-file" in opts else None
    if not command:
        fail("==ERROR== No application to profile was specified.\n")
    replay, collected, sets = validate(opts)
    export = opts.get("--export", [None])[-1]
    if export and not export.endswith(".ncu-rep"):
        export += ".ncu-rep"
    if export and os.path.exists(export) and "--force-overwrite" not in opts:
        fail(f"==ERROR== File {os.path.basename(export)} already exists. Use '-f' for overwriting the file.\n")
    if os.environ.get("FAKE_NCU_CTRPERM") == "1":
        # As reported in public issue trackers: the error, the program still runs, nothing profiled, rc 0.
        out("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
            "Counters on the target device 0. For instructions on enabling permissions and to get more "
            "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")
        import subprocess

        rc = subprocess.call(command, env=dict(os.environ, FAKE_NCU_SESSION=""))
        out("==WARNING== No kernels were profiled.\n")
        return rc
    if os.environ.get("FAKE_NCU_ERROR"):
        fail(f"==ERROR== {os.environ['FAKE_NCU_ERROR']}\n")
    counter = os.environ.get("FAKE_NCU_FAIL_FIRST")  # "N:/path/to/counter": the first N runs fail
    if counter:
        n, path = counter.split(":", 1)
        runs = int(open(path).read()) if os.path.exists(path) else 0
        with open(path, "w") as f:
            f.write(str(runs + 1))
        if runs < int(n):
            fail("==ERROR== Failed to prepare kernel for profiling\n==ERROR== Unknown Error on device 0.\n")
    if os.environ.get("FAKE_NCU_TRANSCRIPT"):
        return replay_transcript(os.environ["FAKE_NCU_TRANSCRIPT"], export)
    exe = which(command[0]) or command[0]
    if not os.path.exists(exe):
        fail(f"==ERROR== Failed to launch the application: {command[0]} not found.\n")

    os.setsid()  # escape the launcher's process group, as the real tool's tree did
    state = make_folder("fake-ncu-")
    passes = pass_count(opts, collected, sets)
    session = {
        "state": state, "replay": replay, "passes": passes, "sections": collected,
        "kernel": opts.get("--kernel-name", [None])[-1],
        "skip": int(opts.get("--launch-skip", ["0"])[-1]),
        "count": int(opts["--launch-count"][-1]) if "--launch-count" in opts else None,
        "from_start": opts.get("--profile-from-start", ["on"])[-1] in ("on", "yes", "1"),
        "scale": SCALE,
        "log": log,
        "clock": opts.get("--clock-control", ["base"])[-1],
    }
    wedged = os.environ.get("FAKE_NCU_WEDGED") == "1"
    child = {"proc": None, "stopping": False, "terms": 0, "signals": 0}

    def results():
        try:  # the state folder goes when the run ends, maybe while the report thread looks
            with open(os.path.join(state, DONE)) as f:
                return [literal(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    reports = {"lock": _thread.RLock(), "closed": False}  # re-entrant: the stop's handler may come mid-write

    def write_report(done, last=False):
        """Keep the report current after every kernel, as the real tool does (`done`: the kernels, or their count).
        The last write closes the report: the thread that keeps it current writes no more, so that the front end
        never exits while that thread's copy is half made (a run under load left `r.ncu-rep.<thread>.tmp`)."""
        count = done if isinstance(done, int) else len(done)
        with reports["lock"]:
            if reports["closed"]:
                return
            if export and count and not os.environ.get("FAKE_NCU_NO_REPORT"):
                src = "basic_ok.ncu-rep" if count >= 8 else "partial_mixed_basic.ncu-rep"
                tmp = f"{export}.{_thread.get_ident()}.tmp"
                copyfile(os.path.join(DATA, "reports", src), tmp)
                os.replace(tmp, export)
            reports["closed"] = last  # after the copy: a stop that comes during the last write writes it again

    ignore = os.environ.get("FAKE_NCU_IGNORE_SIGNALS")

    def shutdown(signum, frame):
        child["signals"] += 1
        if ignore is not None:
            if child["signals"] <= int(ignore):
                return
        elif signum == signal.SIGTERM:
            child["terms"] += 1
            if child["terms"] == 1:
                return  # the first SIGTERM is ignored
        if child["stopping"]:
            return
        child["stopping"] = True
        out("==PROF== Trying to shutdown target application\n")
        current = None
        try:
            with open(os.path.join(state, "current")) as f:
                current = literal(f.read())
        except (OSError, ValueError, SyntaxError):
            pass
        p = child["proc"]
        if p and p.poll() is None:
            try:
                with open(os.path.join(state, "target_pid")) as f:
                    os.kill(int(f.read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        if current:
            out(f"\n==ERROR== Failed to profile \"{current['name']}\" in process {current['pid']}\n")
        out("==PROF== Trying to shutdown target application\n")
        out("==ERROR== The application returned an error code (9).\n")
        done = results()
        write_report(done, last=True)
        if export and os.path.exists(export):
            out(f"==PROF== Report: {os.path.abspath(export)}\n")
        remove_folder(state)
        os._exit(9)

    # The program signals each finished kernel on a FIFO (fakecuda._record), which this front end holds open for
    # reading and writing: the thread sleeps until a kernel finished instead of polling (a 20 ms poll cost ~5 ms of
    # CPU per second of every run), and a program never blocks or fails for want of a reader.
    wake = os.path.join(state, WAKE)
    os.mkfifo(wake, 0o600)
    wake_fd = os.open(wake, os.O_RDWR)

    def keep_report_current():
        """Counts the finished kernels as they come (only the new lines: a run of 50,000 kernels read the whole
        file again every 20 ms), and writes the report when there are more."""
        offset = written = 0
        while True:
            os.read(wake_fd, 65536)  # one byte a finished kernel, maybe several at once
            try:
                with open(os.path.join(state, DONE), "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            whole = chunk.rfind(b"\n") + 1  # a line still being written waits for the next look
            if whole:
                offset += whole
                written += chunk.count(b"\n", 0, whole)
                write_report(written)

    # SIGINT and SIGTERM are the main thread's: the thread starts with them blocked (it inherits the mask). One taken
    # by that thread while the main thread blocked them (Subreaper's fork) ran no handler until the stop's grace ran
    # out (CPython runs handlers in the main thread only, and that delivery did not wake it from its waitpid).
    caught = {signal.SIGINT, signal.SIGTERM}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, caught)
    _thread.start_new_thread(keep_report_current, ())  # a daemon thread
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    signal.signal(signal.SIGINT, signal.SIG_IGN if wedged else shutdown)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if wedged else shutdown)

    app_passes = passes if replay in ("application", "app-range") else 1
    rc = 0
    seen = 0
    for app_pass in range(1, app_passes + 1):
        child["proc"] = Subreaper(state, command, dict(session, app_pass=app_pass))
        rc = child["proc"].wait()
        done = results()
        if replay == "kernel" and len(done) != seen:
            seen = len(done)
        write_report(done)
        if rc != 0:
            break
    stuck = os.environ.get("FAKE_NCU_STUCK")
    if stuck == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)  # a SIGINT that comes meanwhile waits for SIGCONT
    while wedged or stuck == "wedge":  # a front end that never finishes on its own
        time.sleep(3600)
    done = results()
    ranges = os.path.exists(os.path.join(state, "ranges"))
    if replay in ("range", "app-range") and not ranges or not done:
        write_report(0, last=True)  # no report to come: the thread stops writing before this process ends
    remove_folder(state)
    if rc != 0:
        out(f"==ERROR== The application returned an error code ({rc}).\n")
    if replay in ("range", "app-range") and not ranges:
        out("==WARNING== No ranges were profiled.\n==WARNING== See https://docs.nvidia.com/nsight-compute/"
            "ProfilingGuide/index.html#range-replay for range-based replay mode requirements and limitations.\n")
        return 0 if rc == 0 else rc
    if not done:
        out("==WARNING== No kernels were profiled.\n")
        return 0 if rc == 0 else rc
    if replay in ("application", "app-range"):
        time.sleep(0.05 * SCALE)
        out("==PROF== Creating report from application replay data: 0%.")
        for piece in ("...", ".50%", "....", ".100%\n"):
            time.sleep(0.02 * SCALE)
            out(piece)
    write_report(done, last=True)
    if export and not os.environ.get("FAKE_NCU_NO_REPORT"):
        out(f"==PROF== Report: {os.path.abspath(export)}\n")
    else:
        for r in done:
            out(f"[{r['pid']}] app@127.0.0.1\n  {r['name']}() (256, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, "
                "CC 9.0\n    Section: GPU Speed Of Light Throughput\n"
                "    ----------------------- ----------- -------------\n")
    return rc

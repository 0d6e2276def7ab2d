"""The fake "injection library": what a program launched by the fake ncu prints.

The real ncu injects a library into the target; the progress pieces then come
from inside the target, without newlines, and a kernel that hangs under the
profiler hangs the target, not ncu. Fake programs call `launch(...)`; outside
the fake ncu (no FAKE_NCU_SESSION) it returns at once, like a kernel that
does not hang without the profiler; a `spin` kernel takes its seconds there
too, and one that hangs `always` hangs there too. Under the fake nsys
(FAKE_NSYS_TRACE names a file) every launch is recorded with its duration,
as nsys's CUDA trace would.

Ranks of a multi-process job (started by tests/fake_dist/torchrun, which sets
FAKE_DIST_DIR) announce themselves (`Connected to process`) as ncu's injection
does in every CUDA process it profiles, and their collectives (`launch(...,
collective=True)`) meet in FAKE_DIST_DIR: each rank's half waits for every
other rank's. As with the real ncu (FACTS, "Multi-process programs"), profiled
launches are serialised across the profiled processes (a lock held for the
whole profile), so a profiled collective waits forever for a partner that
cannot launch its half while other ranks are profiled too; and a multi-pass
profile replays the collective on its rank alone, so its second pass waits
forever even when only one rank is profiled. Single-pass profiles of one rank
go through.
"""
# Imported by every fake program run (the suite's ~1,500): only modules that a `python -S` has loaded already, or
# cheap ones; json, re, random, fcntl and signal (enum) cost 15 ms of CPU a run on the 2-core machine, more than the
# interpreter's start, and are imported where a path needs them. The fake ncu hands its session over as a Python
# literal (ncufront.Subreaper), and the finished kernels go back to it as such.
import _signal as signal  # signal.py imports enum; pause() is all that is used here
import atexit
import os
import sys
import time

import faketracer
from lean import literal

_SESSION = literal(os.environ.get("FAKE_NCU_SESSION") or "None")  # as ncufront wrote it
#: ncu's base clocks slow cycle-bound work by this (FACTS.md, H100); --clock-control none: 1.0.
BASE_CLOCK_FACTOR = 1.245
_state = {"matched": 0, "profiled": 0, "in_range": False, "range_kernels": [], "ranges": 0}


def _random():
    """The progress marks' random merges: random.Random(FAKE_NCU_SEED or the pid), made at the first use;
    seeded by the pid it is _random.Random's own generator, without random.py's imports (the same numbers)."""
    if "rng" not in _state:
        seed = os.environ.get("FAKE_NCU_SEED")
        if seed is None:
            import _random

            _state["rng"] = _random.Random(os.getpid())
        else:
            import random

            _state["rng"] = random.Random(seed)
    return _state["rng"]

_DIST = os.environ.get("FAKE_DIST_DIR")
_calls = {}

SLOW_WARNING = ("\n==WARNING== Launching the workload is taking more time than expected. If this continues to hang, "
                "terminate the profile and re-try by profiling the range of all related launches using "
                "'--replay-mode {mode}'. See https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#replay "
                "for more details.\n")


_LOG = {}


def _out(text):
    """ncu's messages: to its --log-file if it has one (as the real injection does), else stdout. ncu's "Connected
    to process" line came before this process started: the fake's launcher holds it until then (ncufront._gated),
    as the real injection holds the process until ncu has accepted it."""
    log = _SESSION.get("log") if _SESSION else None
    if log and "fd" not in _LOG:
        _LOG["fd"] = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.write(_LOG.get("fd", 1), text.encode())


def _scale():
    return float(_SESSION.get("scale", 1.0))


def _selected(name):
    """Kernel filter, launch skip and count, profile-from-start: as ncu applies them."""
    s = _SESSION
    if not s["from_start"] and not _state["in_range"]:
        return False
    k = s.get("kernel")
    if k:
        if k.startswith("regex:"):
            import re

            if not re.search(k[6:], name):
                return False
        elif k != name:
            return False
    _state["matched"] += 1
    if _state["matched"] <= s["skip"]:
        return False
    if s["count"] is not None and _state["profiled"] >= s["count"]:
        return False
    return True


def _hangs(spec):
    if spec.get("hang"):
        return True
    collected = set(_SESSION["sections"])
    return any(all(sec in collected for sec in group) for group in spec.get("hang_if", []))


def _record(name, kid, passes, file="done.txt"):
    """A finished kernel, for the front end (ncufront.DONE): one line, a Python literal."""
    with open(os.path.join(_SESSION["state"], file), "a") as f:
        f.write(repr({"name": name, "id": kid, "passes": passes, "pid": os.getpid()}) + "\n")
    try:  # wake the front end's report thread (ncufront.WAKE); gone with the front end: nobody to tell
        fd = os.open(os.path.join(_SESSION["state"], "done.fifo"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b".")
    except OSError:  # full (65,536 kernels not yet counted): it reads them all at its next wake
        pass
    finally:
        os.close(fd)


def _set_current(name):
    path = os.path.join(_SESSION["state"], "current")
    if name is None:
        try:
            os.unlink(path)
        except OSError:
            pass
    else:
        with open(path, "w") as f:
            f.write(repr({"name": name, "pid": os.getpid()}))


def _hang_forever(mode):
    time.sleep(3.0 * _scale())
    _out(SLOW_WARNING.format(mode=mode))
    while True:
        signal.pause()


def _progress(passes, gap, mode="range", gaps=None):
    """0%, dots, 50%, dots, 100% - N passes: in pieces that merge at random
    (or, with `gaps`, in gaps + 1 writes, `gap` seconds apart).

    A kernel whose marks are more than 3 s apart gets the slow-launch warning
    once, in the middle of its progress line, and then goes on.
    """
    pieces = ["0%", ".", ".", ".", ".", "50%", ".", ".", ".", ".",
              f"100% - {passes} pass{'' if passes == 1 else 'es'}\n"]
    warn_after = 3.0 * _scale()
    last_piece = len(pieces) - 1
    writes = None if gaps is None else {0, last_piece} | {round(k * last_piece / gaps) for k in range(1, gaps)}
    buf, last, warned = "", time.monotonic(), False
    for i, piece in enumerate(pieces):
        buf += piece
        merge = _random().random() < 0.4 if writes is None else i not in writes
        if merge and not piece.endswith("\n"):
            continue  # merge with the next piece
        if i > 0:
            time.sleep(max(0.0, last + gap - time.monotonic()))
        _out(buf)
        buf, last = "", time.monotonic()
        if not warned and gap >= warn_after:
            time.sleep(warn_after)
            _out(SLOW_WARNING.format(mode=mode))
            warned = True


def _rank_and_world():
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    world = os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or "1"
    return int(rank), int(world)


def _announce():
    """ncu connects to every CUDA process it profiles; the subreaper announces only its direct child."""
    if _SESSION is None or not _DIST or str(os.getppid()) == os.environ.get("FAKE_NCU_SUBREAPER"):
        return
    pid = os.getpid()
    # Between two kernels' profiles when it can (the parser's lot with cut lines is tested elsewhere),
    # but a process connects even while another rank's profile waits for it.
    with _serialised(wait=0.5 * _scale()):
        _out(f"==PROF== Connected to process {pid} ({os.path.realpath(sys.executable)})\n")
    atexit.register(lambda: _out(f"==PROF== Disconnected from process {pid}\n"))


def _rendezvous(tag, warn_mode=None):
    """This rank's half of a collective: wait until every rank has arrived (forever, if one never does)."""
    rank, world = _rank_and_world()
    open(os.path.join(_DIST, f"{tag}#{rank}"), "w").close()
    start, warned = time.monotonic(), warn_mode is None
    while sum(f.startswith(tag + "#") for f in os.listdir(_DIST)) < world:
        if not warned and time.monotonic() - start > 3.0 * _scale():
            _out(SLOW_WARNING.format(mode=warn_mode))
            warned = True
        time.sleep(0.02)  # a rank that waits for one that never comes (a hang) polls for seconds


class _serialised:
    """ncu serialises kernel launches across the processes it profiles: one profile at a time."""

    def __init__(self, wait=None):
        self.wait = wait  # None: as long as it takes

    def __enter__(self):
        import fcntl

        self.f = open(os.path.join(_SESSION["state"], "launch.lock"), "w") if _DIST else None
        end = None if self.wait is None else time.monotonic() + self.wait
        while self.f:
            try:
                fcntl.flock(self.f, fcntl.LOCK_EX | (0 if end is None else fcntl.LOCK_NB))
                return
            except BlockingIOError:
                if time.monotonic() > end:
                    return
                time.sleep(0.005)

    def __exit__(self, *exc):
        if self.f:
            self.f.close()


def _collective(label, tag, passes):
    """A profiled collective in kernel replay: pass 1 meets the other ranks, a replayed pass never does."""
    _out(f'==PROF== Profiling {label}: ')
    time.sleep(0.02 * _scale())
    _out("0%..")
    _rendezvous(tag, warn_mode="range")
    if passes > 1:
        _rendezvous(tag + "@replay2", warn_mode="range")
    _out("..50%....100% - 1 pass\n")


def _plain(name, spin, always, graph=None):
    """A launch without ncu: it takes `spin` seconds (or hangs, `always`); nsys and the tracer record it
    (graph: the correlation id of the cuGraphLaunch it belongs to)."""
    corr = faketracer.launch(name) if graph is None else graph
    if always:
        while True:
            signal.pause()
    start = time.time_ns()
    if spin:
        time.sleep(spin)
    faketracer.kernel(name, corr, start, time.time_ns(), in_graph=graph is not None)
    trace = os.environ.get("FAKE_NSYS_TRACE")
    if trace:
        import json

        with open(trace, "a") as f:
            f.write(json.dumps({"name": f"{name}(float *, int)", "short": name, "start": start,
                                "dur": max(1000, time.time_ns() - start)}) + "\n")


def _spin_progress(passes, spin):
    """A kernel of `spin` seconds alone, replayed `passes` times under base clocks.

    One pass: `0%....50%....` at once, the pass, the 3 s warning within it, then
    `100% - 1 pass` (FACTS.md); more passes: a mark every tenth of them.
    """
    factor = 1.0 if _SESSION.get("clock") == "none" else BASE_CLOCK_FACTOR
    if passes > 1:
        _progress(passes, passes * spin * factor / 10)
        return
    _out("0%....50%....")
    warn_after = 3.0 * _scale()
    if spin * factor > warn_after:
        time.sleep(warn_after)
        _out(SLOW_WARNING.format(mode="range"))
        time.sleep(spin * factor - warn_after)
    else:
        time.sleep(spin * factor)
    _out("100% - 1 pass\n")


def launch(name, hang=False, hang_if=(), slow=None, exit_code=None, collective=False, spin=None, always=False,
           gaps=None):
    """One kernel launch, as the profiled program would experience it.

    slow: seconds between its progress marks; gaps: how many such gaps (a
    test's time knob; by default the marks merge at random, about 6 gaps).
    """
    if exit_code is not None:
        os._exit(exit_code)
    tag = None
    if collective and _DIST:
        _calls[name] = _calls.get(name, 0) + 1
        replayed = _SESSION is not None and _SESSION.get("app_pass", 1) > 1
        tag = f"{name}.{_calls[name]}" + (f"@pass{_SESSION['app_pass']}" if replayed else "")
    if _SESSION is None:
        if tag:
            _rendezvous(tag)
        _plain(name, spin, always)
        return
    spec = {"hang": hang, "hang_if": list(hang_if)}
    if _state["in_range"] and _SESSION["replay"] in ("range", "app-range"):
        _state["range_kernels"].append(name)
        return _rendezvous(tag) if tag else None
    if _SESSION["replay"] in ("range", "app-range") or not _selected(name):
        return _rendezvous(tag) if tag else None
    with _serialised():
        _profiled(name, spec, slow, tag, spin, always, gaps)


def _profiled(name, spec, slow, tag, spin, always, gaps=None):
    """A launch that ncu profiles."""
    kid = _state["profiled"]
    _state["profiled"] += 1
    # ncu 2025.3.1 prints no ID after the name when a kernel-name filter is given (GPU machine, 2026-11-26).
    label = f'"{name}"' if _SESSION.get("kernel") else f'"{name}" - {kid}'
    if _SESSION["count"] is not None and not _SESSION.get("kernel"):
        # With --launch-count, ncu 2025.3.1 numbers the profiled launches: `"k" - 0 (1/1): ` (GPU machine,
        # 2026-11-26). With a kernel-name filter as well (the sweep's probes) the GPU tests parsed the
        # header without it, so it is not printed then.
        label += f' ({kid + 1}/{_SESSION["count"]})'
    passes = _SESSION["passes"]
    scale = _scale()
    if _SESSION["replay"] == "application":
        _set_current(name)
        _out(f'==PROF== Profiling {label}: Application replay pass {_SESSION["app_pass"]}\n')
        if tag:
            _rendezvous(tag, warn_mode="app-range")
        if _hangs(spec) or always:
            _hang_forever("app-range")
        time.sleep(spin * BASE_CLOCK_FACTOR if spin else 0.02 * scale if slow is None else slow)
        _set_current(None)
        if _SESSION["app_pass"] == passes:
            _record(name, kid, passes)
        return
    _set_current(name)
    if tag:
        _collective(label, tag, passes)
        _set_current(None)
        _record(name, kid, 1)
        return
    _out(f'==PROF== Profiling {label}: ')
    if _hangs(spec) or always:
        time.sleep(0.02 * scale)
        _out("0%..")
        _hang_forever("range")
    if spin is not None:
        _spin_progress(passes, spin)
    else:
        _progress(passes, slow if slow is not None else 0.004 * passes * scale, gaps=gaps)
    _set_current(None)
    _record(name, kid, passes)


_announce()


def _traced_api(name):
    """Under the fake nsys: a runtime API call, as its CUPTI_ACTIVITY_KIND_RUNTIME would hold it."""
    trace = os.environ.get("FAKE_NSYS_TRACE")
    if trace:
        import json

        with open(trace, "a") as f:
            f.write(json.dumps({"api": name, "start": time.time_ns()}) + "\n")


def graph_launch(kernels):
    """cuGraphLaunch of kernels [(name, spin)]: without ncu, one graph launch and its kernels one by one."""
    if _SESSION is not None:
        for name, spin in kernels:
            launch(name, spin=spin)
        return
    corr = faketracer.graph()
    for name, spin in kernels:
        _plain(name, spin, False, graph=corr if corr is not None else -1)


def profiler_start():
    _traced_api("cudaProfilerStart_v4000")
    faketracer.profiler("cuProfilerStart")
    _state["in_range"] = True
    _state["range_kernels"] = []


def profiler_stop():
    _traced_api("cudaProfilerStop_v4000")
    faketracer.profiler("cuProfilerStop")
    _state["in_range"] = False
    if _SESSION is None or _SESSION["replay"] not in ("range", "app-range") or not _state["range_kernels"]:
        return
    kid = _state["ranges"]
    _state["ranges"] += 1
    open(os.path.join(_SESSION["state"], "ranges"), "a").close()
    _out(f'==PROF== Profiling "range" - {kid}: ')
    _progress(_SESSION["passes"] + 1, 0.004 * _SESSION["passes"] * _scale())
    _record("range", kid, _SESSION["passes"] + 1)

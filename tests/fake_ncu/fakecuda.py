"""The fake "injection library": what a program launched by the fake ncu prints.

The real ncu injects a library into the target; the progress pieces then come
from inside the target, without newlines, and a kernel that hangs under the
profiler hangs the target, not ncu. Fake programs call `launch(...)`; outside
the fake ncu (no FAKE_NCU_SESSION) it returns at once, like a kernel that
does not hang without the profiler.
"""
import json
import os
import random
import re
import signal
import time

_SESSION = json.loads(os.environ["FAKE_NCU_SESSION"]) if os.environ.get("FAKE_NCU_SESSION") else None
_state = {"matched": 0, "profiled": 0, "in_range": False, "range_kernels": [], "ranges": 0}
_rng = random.Random(os.environ.get("FAKE_NCU_SEED", os.getpid()))

SLOW_WARNING = ("\n==WARNING== Launching the workload is taking more time than expected. If this continues to hang, "
                "terminate the profile and re-try by profiling the range of all related launches using "
                "'--replay-mode {mode}'. See https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#replay "
                "for more details.\n")


_LOG = {}


def _out(text):
    """ncu's messages: to its --log-file if it has one (as the real injection does), else stdout."""
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


def _record(name, kid, passes, file="done.jsonl"):
    with open(os.path.join(_SESSION["state"], file), "a") as f:
        f.write(json.dumps({"name": name, "id": kid, "passes": passes, "pid": os.getpid()}) + "\n")


def _set_current(name):
    path = os.path.join(_SESSION["state"], "current")
    if name is None:
        try:
            os.unlink(path)
        except OSError:
            pass
    else:
        with open(path, "w") as f:
            json.dump({"name": name, "pid": os.getpid()}, f)


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
        merge = _rng.random() < 0.4 if writes is None else i not in writes
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


def launch(name, hang=False, hang_if=(), slow=None, exit_code=None, gaps=None):
    """One kernel launch, as the profiled program would experience it.

    slow: seconds between its progress marks; gaps: how many such gaps (a
    test's time knob; by default the marks merge at random, about 6 gaps).
    """
    if exit_code is not None:
        os._exit(exit_code)
    if _SESSION is None:
        return
    spec = {"hang": hang, "hang_if": list(hang_if)}
    if _state["in_range"] and _SESSION["replay"] in ("range", "app-range"):
        _state["range_kernels"].append(name)
        return
    if _SESSION["replay"] in ("range", "app-range") or not _selected(name):
        return
    kid = _state["profiled"]
    _state["profiled"] += 1
    # ncu 2025.3.1 prints no ID after the name when a kernel-name filter is given (GPU machine, 2026-11-26).
    label = f'"{name}"' if _SESSION.get("kernel") else f'"{name}" - {kid}'
    passes = _SESSION["passes"]
    scale = _scale()
    if _SESSION["replay"] == "application":
        _set_current(name)
        _out(f'==PROF== Profiling {label}: Application replay pass {_SESSION["app_pass"]}\n')
        if _hangs(spec):
            _hang_forever("app-range")
        time.sleep(0.02 * scale if slow is None else slow)
        _set_current(None)
        if _SESSION["app_pass"] == passes:
            _record(name, kid, passes)
        return
    _set_current(name)
    _out(f'==PROF== Profiling {label}: ')
    if _hangs(spec):
        time.sleep(0.02 * scale)
        _out("0%..")
        _hang_forever("range")
    _progress(passes, slow if slow is not None else 0.004 * passes * scale, gaps=gaps)
    _set_current(None)
    _record(name, kid, passes)


def profiler_start():
    _state["in_range"] = True
    _state["range_kernels"] = []


def profiler_stop():
    _state["in_range"] = False
    if _SESSION is None or _SESSION["replay"] not in ("range", "app-range") or not _state["range_kernels"]:
        return
    kid = _state["ranges"]
    _state["ranges"] += 1
    open(os.path.join(_SESSION["state"], "ranges"), "a").close()
    _out(f'==PROF== Profiling "range" - {kid}: ')
    _progress(_SESSION["passes"] + 1, 0.004 * _SESSION["passes"] * _scale())
    _record("range", kid, _SESSION["passes"] + 1)

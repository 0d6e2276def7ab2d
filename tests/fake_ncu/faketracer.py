"""The fake CUPTI tracer: what nsightwrap's injection library writes, from inside a fake CUDA program.

Active only without the (fake) profiler, when CUDA_INJECTION64_PATH names an existing file (the fake
"library": any file) and NSIGHTWRAP_TRACE_DIR is set, as the real tracer is loaded by the driver and does
nothing without its folder. It appends one JSON line per event, each with one write(2), to
$NSIGHTWRAP_TRACE_DIR/trace-<pid>.jsonl (0600), in the format of nsightwrap/calibrate/cupti/tracer.cpp:
init (on the first CUDA call, as the driver loads the tracer at cuInit), launch, graph, kernel (CUPTI's
clock: time.time_ns(), another clock than mono_ns, as CUPTI's is), range, exit (at a normal exit; a
process ended by os._exit or a signal has none). FAKE_TRACER_ERROR=TEXT: the tracer cannot set itself up
(an "error" line and nothing more); FAKE_TRACER_DROPPED=N: an "error" line after each kernel, as the real
tracer writes when CUPTI dropped records.
"""
import atexit
import os
import time

_state = {"fd": None, "seq": 0, "corr": 0, "off": False}


def _active():
    lib, folder = os.environ.get("CUDA_INJECTION64_PATH"), os.environ.get("NSIGHTWRAP_TRACE_DIR")
    return bool(lib and folder and os.path.isfile(lib)) and not _state["off"]


def _write(ev):
    import json  # only where the tracer is on: every fake program imports this module

    os.write(_state["fd"], (json.dumps(dict(ev, pid=os.getpid())) + "\n").encode())


def _ready():
    """Open the trace at the first CUDA call (init line); False when the tracer is not there."""
    if not _active():
        return False
    if _state["fd"] is None:
        path = os.path.join(os.environ["NSIGHTWRAP_TRACE_DIR"], f"trace-{os.getpid()}.jsonl")
        _state["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if os.environ.get("FAKE_TRACER_ERROR"):
            _write({"ev": "error", "what": os.environ["FAKE_TRACER_ERROR"]})
            _state["off"] = True
            return False
        _write({"ev": "init", "mono_ns": time.monotonic_ns(), "cupti_ns": time.time_ns(), "version": 1})
        atexit.register(lambda: _write({"ev": "exit", "mono_ns": time.monotonic_ns()}))
    return True


def _corr():
    _state["corr"] += 1
    return _state["corr"]


def demangled(name):
    """The name CUPTI gives the fake kernel NAME (its function_core is NAME)."""
    return f"void fake::{name}<float>(float*, int)"


def launch(name):
    """A kernel launch API entered: its correlation id (None when not traced)."""
    if not _ready():
        return None
    corr = _corr()
    _write({"ev": "launch", "corr": corr, "seq": _state["seq"], "name": demangled(name),
            "mono_ns": time.monotonic_ns()})
    _state["seq"] += 1
    return corr


def graph():
    """cuGraphLaunch entered: its correlation id (None when not traced)."""
    if not _ready():
        return None
    corr = _corr()
    _write({"ev": "graph", "corr": corr, "mono_ns": time.monotonic_ns()})
    return corr


def kernel(name, corr, start_ns, end_ns, in_graph=False):
    """A kernel finished on the GPU (CUPTI's clock)."""
    if corr is not None and _active():
        _write({"ev": "kernel", "corr": corr, "name": demangled(name), "start_ns": start_ns, "end_ns": end_ns,
                "graph": int(in_graph)})
        if os.environ.get("FAKE_TRACER_DROPPED"):
            _write({"ev": "error", "what": f"CUPTI dropped {os.environ['FAKE_TRACER_DROPPED']} activity records"})


def profiler(api):
    if _ready():
        _write({"ev": "range", "api": api, "mono_ns": time.monotonic_ns()})

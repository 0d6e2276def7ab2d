"""The child process in which profile(fn) runs fn, under ncu or for calibration.

fn never runs in the caller: a replay deadlock inside the caller's process
could not be undone. The child imports fn by reference (module and
qualified name; a script's __main__ is loaded from its file without running
its main block), unpickles the arguments, makes `warmup` calls outside any
profiled range, each timed with the device synchronised, and reports their
times to the watchdog (nsightwrap.ncu.calltime) *before* it opens the range;
then `repeat` calls inside one profiler range and one NVTX range (none for a run without a profiler:
CallSpec.ranged). It writes
what happened (timings, return value, or the traceback) to a result file,
which the parent reads. It imports no pandas and reads no report.

    python -m nsightwrap.call SPEC.pkl [RESULT.pkl]
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from nsightwrap.call import ranges
from nsightwrap.ncu.calltime import write_call_time
from nsightwrap.watch.files import write_atomic

RANGE_NAME = "nsightwrap"
#: Set (by nsightwrap.triage for a callable): a failing call also prints its traceback on stderr, where its
#: CUDA error is read as a program's would be.
TRACEBACK_VAR = "NSIGHTWRAP_CALL_TRACEBACK"


@dataclass
class CallSpec:
    """What the child needs: where fn lives, its arguments, how to call it."""

    module: str
    qualname: str
    file: Optional[str]  # for functions of a script run as __main__
    args_pickle: bytes
    warmup: int
    repeat: int
    sys_path: list[str]
    result_path: str
    call_time_path: Optional[str] = None  # where the warm-up times go, for the watchdog
    #: The measured calls are marked as a profiler range (profile(fn): what ncu profiles). Not for a call run
    #: without a profiler (triage, profile(fn)'s plain run): nothing reads the range there, and before fn's first
    #: CUDA call opening it would start CUDA on device 0 itself (ranges._primary_context), not as fn does.
    ranged: bool = True


@dataclass
class CallResult:
    ok: bool
    call_s: list[float] = field(default_factory=list)  # wall time of each measured call
    warmup_s: list[float] = field(default_factory=list)  # wall time of each warm-up call
    value_pickle: Optional[bytes] = None
    value_error: Optional[str] = None  # why the value could not be pickled
    error: Optional[str] = None  # the child's traceback
    range_api: str = ""


def _load_main(file: str):
    """A script's module without its `if __name__ == "__main__"` block."""
    spec = importlib.util.spec_from_file_location("__nsightwrap_main__", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["__nsightwrap_main__"] = module
    spec.loader.exec_module(module)
    sys.modules["__main__"] = module  # so pickles that name __main__.X find X
    return module


def resolve(spec: CallSpec) -> Callable[..., Any]:
    if spec.module == "__main__":
        if not spec.file:
            raise RuntimeError("the function was defined in an interactive __main__ with no file; "
                               "define it in a module or a script file")
        module = _load_main(spec.file)
    else:
        module = importlib.import_module(spec.module)
    obj = module
    for part in spec.qualname.split("."):
        obj = getattr(obj, part)
    while hasattr(obj, "__nsightwrap_wrapped__"):  # @profiled: call the function, not the profiler
        obj = obj.__nsightwrap_wrapped__
    return obj


def _sync() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - synchronisation is best effort here
            pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.cuda.Device().synchronize()
        except Exception:  # noqa: BLE001
            pass


def _timed(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, float]:
    """fn's value and its wall time, the device synchronised at the end."""
    t = time.perf_counter()
    value = fn(*args, **kwargs)
    _sync()
    return value, time.perf_counter() - t


def run(spec: CallSpec) -> CallResult:
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    fn = resolve(spec)
    args, kwargs = pickle.loads(spec.args_pickle)
    warmup_s = [_timed(fn, args, kwargs)[1] for _ in range(spec.warmup)]
    if warmup_s and spec.call_time_path:
        write_call_time(spec.call_time_path, warmup_s)  # before the range: the watchdog knows it in time
    api = ranges.find_range_api() if spec.ranged else None
    result = CallResult(ok=True, range_api=api.describe if api else "no range (not profiled)", warmup_s=warmup_s)
    value = None
    with ranges.range(RANGE_NAME, api=api) if api else contextlib.nullcontext():
        for _ in range(spec.repeat):
            value, took = _timed(fn, args, kwargs)
            result.call_s.append(took)
    try:
        result.value_pickle = pickle.dumps(value)
    except Exception as e:  # noqa: BLE001 - an unpicklable return value is not an error
        result.value_error = f"{type(value).__name__} could not be pickled: {e}"
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], "rb") as f:
        spec: CallSpec = pickle.load(f)
    if len(argv) > 1:
        spec.result_path = argv[1]
    try:
        result = run(spec)
        code = 0
    except BaseException:  # noqa: BLE001 - everything goes back to the caller
        result = CallResult(ok=False, error=traceback.format_exc())
        code = 1
        if os.environ.get(TRACEBACK_VAR) == "1":
            sys.stderr.write(result.error)
    write_atomic(spec.result_path, pickle.dumps(result))
    sys.stdout.flush()
    return code

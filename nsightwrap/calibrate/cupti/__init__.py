"""Kernel times from CUPTI: the injection tracer's build (build) and a follower of its trace (trace).

The tracer (tracer.cpp, a library the CUDA driver loads into any program
through CUDA_INJECTION64_PATH) writes one JSON line per event to
$NSIGHTWRAP_TRACE_DIR/trace-<pid>.jsonl; `build` compiles it once per
machine and CUDA version (cached per user), `trace` reads those files while
they grow. Part of the calibrate layer: nothing here knows ncu.
"""

from nsightwrap.calibrate.cupti.build import TRACER_VAR, TracerBuild, find_tracer, tracer_status
from nsightwrap.calibrate.cupti.trace import TRACE_DIR_VAR, InFlight, StalledKernel, TraceFollower

__all__ = ["InFlight", "StalledKernel", "TRACER_VAR", "TRACE_DIR_VAR", "TraceFollower", "TracerBuild",
           "find_tracer", "tracer_status"]

"""Triage: is it ncu or my kernel? Between the walks (fallback) and profile(fn) (call).

``run.triage_command`` runs the program without ncu several times
(``plain``: finished, failed or hung, the CUDA error, the kernel in flight),
once with CUDA_LAUNCH_BLOCKING=1 after an asynchronous failure,
compute-sanitizer's tools (``sanitizer``), optionally the ncu walk
(``walk``), and ends with a one-line verdict (``verdict``); every run is
recorded in the hang store (``records``, nsightwrap.store.triage).
``cudaerrors`` reads a CUDA error from a program's output. ``sanitizer``
runs compute-sanitizer (``findings`` reads its text, ``slowdown`` says how
long it may stay silent).
"""

from nsightwrap.triage.cudaerrors import CudaError, find_cuda_error
from nsightwrap.triage.plain import PlainRun
from nsightwrap.triage.result import TriageResult
from nsightwrap.triage.run import SANITIZER_TOOLS, TriageOptions, triage_command

__all__ = ["CudaError", "PlainRun", "SANITIZER_TOOLS", "TriageOptions", "TriageResult", "find_cuda_error",
           "triage_command"]

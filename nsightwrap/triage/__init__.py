"""Triage: is it ncu or my kernel? Between the walks (fallback) and profile(fn) (call).

``run.triage_command`` runs the program without ncu several times
(``plain``: finished, failed or hung, the CUDA error, the kernel in flight),
once with CUDA_LAUNCH_BLOCKING=1 after an asynchronous failure,
compute-sanitizer's tools (``sanitizer``: ``findings`` reads its text,
``slowdown`` says how long it may stay silent), optionally the ncu walk
(``walk``), and ends with a one-line verdict (``verdict``); every run is
recorded in the hang store (``records``, nsightwrap.store.triage).
``cudaerrors`` reads a CUDA error from a program's output.

This package imports nothing when loaded: ``import nsightwrap`` loads it to
make ``nsightwrap.triage(fn_or_command, ...)`` callable (nsightwrap/__init__.py),
and the CLI must stay quick.
"""

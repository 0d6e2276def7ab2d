"""Triage: is it ncu or my kernel? Between the walks (fallback) and profile(fn) (call).

``run.triage_command`` runs the program without ncu several times
(``plain``: finished, failed or hung, the CUDA error, the kernel in flight),
once with CUDA_LAUNCH_BLOCKING=1 after an asynchronous failure,
compute-sanitizer's tools (``sanitizer``: ``findings`` reads its text,
``slowdown`` says how long it may stay silent), optionally the ncu walk
(``walk``), and ends with a one-line verdict (``verdict``); every run is
recorded in the hang store (``records``, nsightwrap.store.triage).
``cudaerrors`` reads a CUDA error from a program's output.

The public entry point is ``nsightwrap.triage(fn_or_command, ...)``
(nsightwrap.call.triage), the CLI's ``nsightwrap triage``. This package
imports nothing when loaded: the CLI must stay quick.
"""

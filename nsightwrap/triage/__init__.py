"""Is it the profiler or the kernel? compute-sanitizer and repeated plain runs, each under the watchdog (issue 21).

sanitizer.py runs compute-sanitizer (findings.py reads its text, slowdown.py says how long it may stay
silent); the triage itself (repeated runs, the verdict) builds on them.
"""

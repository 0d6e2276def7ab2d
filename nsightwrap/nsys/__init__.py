"""Nsight Systems under the watchdog: locate.py (find nsys), options.py (options -> argv, report paths),
messages.py (what nsys's output means), run.py (profile_nsys). Its reports are read in nsightwrap.reports.nsys."""

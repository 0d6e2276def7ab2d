"""The watched run's names in one place, for the layers above (older import path).

The pieces live in: watch.tree (the process tree, the cookie, stopping),
watch.run (the watch loop), watch.signals (Ctrl-C, SIGTERM, SIGHUP),
watch.guard (a guard that outlives nsightwrap), watch.records and
watch.orphans (run records, runs whose owner died).
"""

from nsightwrap.watch.orphans import find_orphans
from nsightwrap.watch.run import ObserverFactory, PlainObserver, RunOutcome, watch
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, ProcessTree, StopPolicy, StopRecord, processes_with

__all__ = [
    "COOKIE_VAR",
    "OWNER_VAR",
    "ObserverFactory",
    "PlainObserver",
    "ProcessTree",
    "RunOutcome",
    "StopPolicy",
    "StopRecord",
    "find_orphans",
    "processes_with",
    "watch",
]

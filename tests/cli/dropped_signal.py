"""`python tests/cli/dropped_signal.py MODULE ARGS...`: `python -m nsightwrap ARGS...`, where a SIGTERM comes
while Python runs a weakref callback as the command imports MODULE (importlib's module-lock callback runs in every
import), so that Python drops the KeyboardInterrupt its handler raises. Seen once in a suite run: a SIGTERM 0.01 s
after the start, and the command ran its program to the end and exited 0. Used by
tests/cli/test_no_tracebacks.py and, on the GPU machine, devtools/gpu_dropped_signal.sh."""

import os
import runpy
import signal
import sys
import weakref

MODULE = sys.argv[1]


class Thing:
    pass


class Drop:
    """An import finder that finds nothing: when MODULE is imported, an object dies and its weakref callback
    sends this process a SIGTERM, whose handler then raises inside the callback."""

    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            thing = Thing()
            ref = weakref.ref(thing, lambda _: os.kill(os.getpid(), signal.SIGTERM))  # noqa: F841 - alive till del
            del thing
        return None


sys.meta_path.insert(0, Drop())
sys.argv = ["nsightwrap", *sys.argv[2:]]
runpy.run_module("nsightwrap", run_name="__main__")

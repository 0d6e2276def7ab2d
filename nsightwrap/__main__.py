"""`python -m nsightwrap`: the command line (nsightwrap.cli.main).

The stop signals are taken first, before anything else loads: a Ctrl-C or
SIGTERM while Python imports is then `interrupted` (130, one JSON object
with --json), never a traceback or -15.
"""

import _signal  # the interpreter's own: `signal` takes milliseconds to build its enums
import sys

# First: a stop signal raises KeyboardInterrupt (answered below) until watch.signals owns them; one
# that was ignored (nohup) stays ignored.
for _sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
    if _signal.getsignal(_sig) == _signal.SIG_DFL:
        _signal.signal(_sig, _signal.default_int_handler)
try:
    from nsightwrap.watch.signals import Interrupts

    Interrupts(raise_first=True).__enter__()  # the first signal raises, later ones are only counted
    from nsightwrap.cli.main import main

    _code = main()
except (KeyboardInterrupt, RuntimeError) as _e:  # before main owned the signals itself
    if isinstance(_e, RuntimeError) and not isinstance(_e.__cause__, KeyboardInterrupt):
        raise  # (3.11 wraps a KeyboardInterrupt raised while a class is made in a RuntimeError)
    from nsightwrap.cli.main import answer_interrupted, exit_now

    exit_now(answer_interrupted(sys.argv[1:], "interrupted while starting; nothing was run"))
sys.exit(_code)

"""`python -m nsightwrap`: the command line (nsightwrap.cli.main).

The stop signals are owned first, before anything heavy loads: a Ctrl-C or
SIGTERM while Python imports is then `interrupted` (130, one JSON object
with --json), never a traceback or -15.
"""

import sys

from nsightwrap.watch.signals import Interrupts

_early = Interrupts(raise_first=True)
try:
    _early.__enter__()
    from nsightwrap.cli.main import main

    _code = main()
except KeyboardInterrupt:  # before main owned the signals itself
    from nsightwrap.cli.main import answer_interrupted

    _code = answer_interrupted(sys.argv[1:], "interrupted while starting; nothing was run")
sys.exit(_code)

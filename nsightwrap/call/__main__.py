"""`python -m nsightwrap.call SPEC.pkl [RESULT.pkl]`: the child of profile(fn) (nsightwrap.call.child).

A separate entry so that the child module is imported once, under its own
name (the one its pickled results carry), not run a second time as __main__.
"""

import sys

from nsightwrap.call.child import main

sys.exit(main())

import sys

from nsightwrap.cli.main import main

sys.exit(main())

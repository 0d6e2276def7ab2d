"""What a command imports is what it needs (issue 20: the tests start the command line hundreds of times, and
a user's `nsightwrap hangs list` waits for every import)."""

from __future__ import annotations

import subprocess
import sys

#: Loaded for `hangs bundle` only: the tools' versions (cli.versions) ask the preflight, the calibrator and the
#: sanitizer, ~0.1 s of CPU that `hangs list/show/export/import/forget` never use.
BUNDLE_ONLY = ("nsightwrap.cli.bundle", "nsightwrap.cli.versions", "nsightwrap.cli.preflight",
               "nsightwrap.calibrate.confirm", "nsightwrap.diagnose.sanitizer")


def test_hangs_list_does_not_load_what_only_the_bundle_needs(tmp_path):
    code = ("import sys\nfrom nsightwrap.cli.main import main\n"
            f"rc = main(['hangs', 'list', '--store', {str(tmp_path / 'h.db')!r}])\n"
            f"print(rc, [m for m in {BUNDLE_ONLY!r} if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1:] == ["0 []"], done.stdout + done.stderr

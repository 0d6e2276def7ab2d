"""The store keeps this process's SQLite locks while it checks the file (sweeps on a cluster engine
write one store from many processes while the sweep's threads open their own connections)."""

from __future__ import annotations

import os
import subprocess
import sys

from nsightwrap.store.hangstore import HangStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_second_open_in_this_process_keeps_the_first_ones_locks(tmp_path):
    path = tmp_path / "hangs.db"
    with HangStore(path):
        HangStore(path).close()  # a worker thread's own connection: its checks must not drop our locks
        # Another process opens and closes the store: it must see ours still open and leave the -wal
        # (taking ours for gone, it would delete the -wal under us: a damaged store).
        subprocess.run([sys.executable, "-c", "import sys; from nsightwrap.store.hangstore import HangStore; "
                        "HangStore(sys.argv[1]).close()", str(path)], check=True,
                       env={**os.environ, "PYTHONPATH": ROOT})
        assert (tmp_path / "hangs.db-wal").exists()

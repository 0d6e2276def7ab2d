"""Writers killed at random (tests/store_writer.py): the test of the store's concurrency and its benchmark."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _start(store: str, worker: int, n: int, folder: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "store_writer.py"), store, str(worker), str(n),
                             str(folder / f"done-{worker}")], env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 [str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])})


def write_with_kills(store: str, folder: Path, workers: int, n: int, kills: int, seed: int = 22,
                     timeout_s: float = 300) -> int:
    """Run `workers` writers of `n` records each, SIGKILL one at random `kills` times (each started again),
    wait for all to finish; the kills made."""
    rng = random.Random(seed)
    procs = {w: _start(store, w, n, folder) for w in range(workers)}
    made, deadline = 0, time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs.values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"writers still running after {timeout_s} s")
            time.sleep(rng.uniform(0.05, 0.4))
            running = [w for w, p in procs.items() if p.poll() is None]
            if made < kills and running:
                w = rng.choice(running)
                procs[w].send_signal(signal.SIGKILL)
                procs[w].wait()
                made += 1
                procs[w] = _start(store, w, n, folder)
        bad = {w: p.returncode for w, p in procs.items() if p.returncode != 0}
        if bad:
            raise RuntimeError(f"writers failed: {bad}")
        return made
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def check_written(records, folder: Path, workers: int, n: int) -> tuple[int, int]:
    """(lost, duplicated): records confirmed by a writer but absent, and (worker, i) kept more than once."""
    seen = Counter(r.note for r in records)
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    lost = 0
    for w in range(workers):
        done = (folder / f"done-{w}").read_text().split()
        lost += sum(1 for i in done if seen[f"{w}:{i}"] == 0)
    return lost, duplicated

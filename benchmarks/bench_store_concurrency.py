#!/usr/bin/env python3
"""The shared hang store under fire (issue 22's goal): 8 processes x 500 records, random SIGKILLs, on a real
PostgreSQL server and on SQLite; 0 records lost, 0 duplicated.

    python3 benchmarks/bench_store_concurrency.py                  # both backends, 8 x 500, 12 kills
    python3 benchmarks/bench_store_concurrency.py --workers 8 --records 500 --kills 20 --backends postgresql

A record counts as written once its writer's record() returned (the writer then notes its index in a
file); a writer killed is started again and goes on from its first unnoted record, written again with
the same uid (it may have been committed just before the kill). At the end every noted record must be in
the store exactly once, and every writer's records all there. The PostgreSQL server is tests/pg.py's
(Debian's postgresql 15 binaries, run as an unprivileged user in a temporary folder, removed at the end).
The test suite runs a small version of this (tests/store/test_shared_store.py). Prints one line per backend and
exits 1 if any record was lost or duplicated.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pg  # noqa: E402  (tests/pg.py: the test server)
from store_kills import check_written, write_with_kills  # noqa: E402

from nsightwrap.store.hangstore import HangStore  # noqa: E402


def run(backend: str, args: argparse.Namespace, server) -> bool:
    with tempfile.TemporaryDirectory(prefix="nsightwrap-bench-store-") as folder:
        where = Path(folder)
        store = str(where / "hangs.db") if backend == "sqlite" else server.url(server.new_database())
        with HangStore(store):
            pass  # the schema made once, before the writers race
        start = time.monotonic()
        kills = write_with_kills(store, where, args.workers, args.records, args.kills, seed=args.seed,
                                 timeout_s=args.timeout)
        took = time.monotonic() - start
        with HangStore(store, readonly=True) as s:
            recs = s.records()
        lost, duplicated = check_written(recs, where, args.workers, args.records)
        expected = args.workers * args.records
        print(f"{backend:10s} {args.workers} x {args.records} records, {kills.made} SIGKILLs "
              f"({kills.while_writing} while writing): {len(recs)}/{expected} "
              f"kept, {lost} lost, {duplicated} duplicated, {took:.1f} s ({len(recs) / took:.0f} records/s)")
        return lost == 0 and duplicated == 0 and len(recs) == expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--backends", default="postgresql,sqlite")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    server = None
    if "postgresql" in backends:
        why = pg.missing()
        if why:
            print(f"postgresql: skipped ({why})")
            backends.remove("postgresql")
        else:
            server = pg.start_server()
    try:
        ok = [run(b, args, server) for b in backends]
    finally:
        if server is not None:
            server.stop()
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())

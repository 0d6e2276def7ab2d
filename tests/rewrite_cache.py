"""Test modules rewritten once, before xdist's workers start (issue 20).

pytest rewrites the asserts of every test module it imports and keeps the result in its cache folder
(`__pycache__/test_x.cpython-311-pytest-9.0.3.pyc`, or under PYTHONPYCACHEPREFIX). A clean checkout (CI's) has none:
xdist's six workers start at once, all find none, and all six rewrite the suite's 109 test modules (1 MB of source),
12 s of CPU where once is 2 s. The collection took 15.4 s instead of 7.4 s on the 2-core machine. The controller
now writes the missing ones first, in one process per usable core (no more than the workers), through pytest's own
rewriting and cache paths; the workers then read them as they would after any earlier run. pytest's rewriting is not
public API: a pytest without it (or with asserts not rewritten) makes the workers rewrite as before, slower but the
same, and a module that cannot be rewritten is left to the worker that imports it (it reports the error).
"""

from __future__ import annotations

import os
from pathlib import Path


def warm(config, folder: Path, workers: int) -> list[Path]:
    """Write the rewritten pyc of each test module under `folder` that lacks a current one, in up to `workers`
    processes (forked: the rewriting needs this pytest's config); the modules it found stale."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
        state = config.stash[assertstate_key]
    except (ImportError, KeyError):
        return []
    if state.mode != "rewrite":
        return []

    def pyc(source: Path) -> Path:
        return get_cache_dir(source) / (source.name[:-3] + PYC_TAIL)

    # pytest's own check of a cached pyc (its header: a timestamp in 9.0, the source's hash in 9.2), ~0.4 ms a module
    stale = [p for p in sorted(folder.rglob("test_*.py")) if _read_pyc(p, pyc(p)) is None]
    shares = max(1, min(len(os.sched_getaffinity(0)), workers, len(stale)))
    children = []
    for share in range(1, shares):
        pid = os.fork()
        if pid == 0:  # pragma: no cover (a forked child: its own exit, no pytest teardown)
            status = 1
            try:
                _rewrite(config, state, stale[share::shares], pyc, _rewrite_test, _write_pyc)
                status = 0
            finally:
                os._exit(status)
        children.append(pid)
    try:
        _rewrite(config, state, stale[0::shares], pyc, _rewrite_test, _write_pyc)
    finally:
        for pid in children:
            os.waitpid(pid, 0)
    return stale


def _rewrite(config, state, paths, pyc, rewrite_test, write_pyc) -> None:
    for path in paths:
        target = pyc(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            stat, code = rewrite_test(path, config)
        except Exception:  # noqa: BLE001 (a syntax error, a rewriter's bug: the worker importing it says what)
            continue
        if not write_pyc(state, code, stat, target):
            return  # a folder we cannot write (a read-only checkout): the workers rewrite, as pytest alone does


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
import signal
from pathlib import Path
from typing import Optional


def warm(config, folder: Path, workers: int) -> list[Path]:
    """Write the rewritten pyc of each test module the session asks for (config.args) under `folder` that lacks a
    current one, in up to `workers` processes (forked: the rewriting needs this pytest's config); the modules it
    found stale."""
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

    def rewrite(paths: list[Path]) -> None:
        for path in paths:
            target = pyc(path)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                stat, code = _rewrite_test(path, config)  # (stat, code) in pytest 9.0, (hash, code) in 9.2
            except Exception:  # noqa: BLE001 (a syntax error, a rewriter's bug: the worker importing it says what)
                continue
            if not _write_pyc(state, code, stat, target):
                return  # a folder we cannot write (a read-only checkout): the workers rewrite, as pytest alone does

    # pytest's own check of a cached pyc (its header: a timestamp in 9.0, the source's hash in 9.2), ~0.4 ms a module
    stale = [p for p in _modules(config, folder) if _read_pyc(p, pyc(p)) is None]
    shares = max(1, min(len(os.sched_getaffinity(0)), workers, len(stale)))
    children: list[int] = []
    try:
        mine = stale[0::shares]
        for share in range(1, shares):
            pid = _fork(rewrite, stale[share::shares])
            if pid is None:
                mine += stale[share::shares]  # no process to spare: this one does that share too
            else:
                children.append(pid)
        rewrite(mine)
    finally:
        for pid in children:
            os.waitpid(pid, 0)
    return stale


def _modules(config, folder: Path) -> list[Path]:
    """The test modules under `folder` that the session's arguments name (a file, or a folder's), all of them
    where the arguments name none there."""
    root, wanted = folder.resolve(), set()
    for arg in config.args:
        path = (Path(config.invocation_params.dir) / arg.split("::")[0]).resolve()
        if path.is_dir():
            wanted.update(path.rglob("test_*.py"))
        elif path.name.startswith("test_") and path.suffix == ".py":
            wanted.add(path)
    wanted = {p for p in wanted if p.is_relative_to(root)}
    return sorted(wanted or root.rglob("test_*.py"))


def _fork(rewrite, paths: list[Path]) -> Optional[int]:
    """A child that rewrites `paths` and exits, or None where none can be started. SIGINT and SIGTERM wait until
    the child is inside its own exit's reach: a Ctrl-C at the fork must not make the child a second pytest."""
    stops = {signal.SIGINT, signal.SIGTERM}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        pid = os.fork()
    except OSError:  # a limit on processes: the caller does the work itself
        pid = None
    if pid == 0:  # pragma: no cover (a forked child: its own exit, no pytest teardown)
        status = 1
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            rewrite(paths)
            status = 0
        finally:
            os._exit(status)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid

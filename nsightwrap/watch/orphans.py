"""Trees whose nsightwrap owner is gone: found through run records, stopped like any tree.

The guard stops such a tree within seconds; these are for the machines
where it could not (it was killed too), and for `cleanup`. Only trees with
a record of this user count, and only this user's processes in them: the
cookie alone is never enough to stop a process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import psutil

from nsightwrap.paths import runtime_dir
from nsightwrap.watch.records import RunRecord, forget_run, read_records
from nsightwrap.watch.tree import (
    COOKIE_VAR,
    OWNER_VAR,
    ProcessTree,
    StopPolicy,
    StopRecord,
    processes_with,
    sleeping_wait,
    stop_tree,
)


@dataclass
class OrphanedRun:
    """A run record whose owner is dead, and what is left of its tree."""

    path: Path
    record: RunRecord
    tree: ProcessTree
    members: list[psutil.Process]


def orphaned_runs(env: Optional[Mapping[str, str]] = None) -> list[OrphanedRun]:
    """Records of this user whose owner died; `members` may be empty (a stale record)."""
    found = []
    for path, rec in read_records(runtime_dir(env)):
        if rec.owner_alive():
            continue
        tree = ProcessTree(rec.root_pid, rec.cookie, rec.frontend_names or ("ncu",),
                           root_running=rec.root_alive, uid=os.getuid())
        found.append(OrphanedRun(path, rec, tree, tree.members()))
    return found


def unrecorded(runs: list[OrphanedRun]) -> list[psutil.Process]:
    """This user's processes that carry a cookie of a dead owner but no record: never stopped, only named."""
    known = {r.record.cookie for r in runs}
    left = []
    for p, env in processes_with(COOKIE_VAR, uid=os.getuid()):
        owner = env.get(OWNER_VAR, "")
        if env.get(COOKIE_VAR) not in known and owner.isdigit() and not psutil.pid_exists(int(owner)):
            left.append(p)
    return left


def find_orphans(env: Optional[Mapping[str, str]] = None) -> list[psutil.Process]:
    """Live processes of runs whose nsightwrap owner was killed (and whose guard did not stop them)."""
    try:
        return [p for run in orphaned_runs(env) for p in run.members]
    except Exception:  # noqa: BLE001 - a warning helper must never fail a run
        return []


def stop_orphaned(run: OrphanedRun, policy: StopPolicy = StopPolicy()) -> StopRecord:
    """SIGINT to the front end with the normal grace, then SIGTERM, then SIGKILL; the record goes when all are gone."""
    rec = stop_tree(run.tree, policy, "cleanup", sleeping_wait(run.tree))
    if not rec.survivors:
        forget_run(run.path, run.record.tool_log)
    return rec

"""Run records: proof that nsightwrap started a tree, for stopping it later.

An environment variable proves nothing (anyone can set NSIGHTWRAP_RUN), so
`cleanup` only stops trees for which a record exists in this user's private
runtime folder: written when the tree starts (the owner's and the root's
pid and start time, the cookie), removed when the run ends. A record whose
owner is gone and whose tree is still alive is an orphaned run.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from nsightwrap.paths import ENV_RUNTIME
from nsightwrap.secrets import mask_argv
from nsightwrap.watch.tree import same_process

__all__ = ["RUNTIME_VAR", "SUFFIX", "RunRecord", "forget_run", "read_records", "remove_record", "write_record"]

RUNTIME_VAR = ENV_RUNTIME  # the folder itself is resolved with the other per-user folders, in nsightwrap.paths
SUFFIX = ".run.json"


@dataclass(frozen=True)
class RunRecord:
    """One watched tree, as its owner wrote it down."""

    cookie: str
    owner_pid: int
    owner_start: Optional[float]
    root_pid: int
    root_start: Optional[float]
    argv: list[str] = field(default_factory=list)
    frontend_names: list[str] = field(default_factory=list)
    started_wall: float = 0.0
    tool_log: Optional[str] = None

    def owner_alive(self) -> bool:
        return same_process(self.owner_pid, self.owner_start)

    def root_alive(self) -> bool:
        return same_process(self.root_pid, self.root_start)

    def started(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_wall))


def write_record(folder: Path, record: RunRecord) -> Path:
    """Atomically, readable by this user only."""
    path = folder / f"{record.cookie}{SUFFIX}"
    tmp = folder / f".{record.cookie}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(asdict(record), argv=mask_argv(record.argv)), f)  # the record is read, never run
    os.replace(tmp, path)
    return path


def read_records(folder: Path) -> list[tuple[Path, RunRecord]]:
    """The records in `folder` that this user wrote; malformed ones are skipped."""
    found = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            found.append((path, RunRecord(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            continue
    return found


def remove_record(path: Optional[Path]) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def forget_run(record: Optional[Path], tool_log: Optional[str]) -> None:
    """Remove what a run left on disk once its tree is gone: the record, the tool's log and its empty folder."""
    remove_record(record)
    if tool_log:
        for remove, path in ((os.unlink, tool_log), (os.rmdir, os.path.dirname(tool_log))):
            try:
                remove(path)
            except OSError:
                pass

"""Can a file be written there? Asked before launching, not found out after a long run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["folder_problem"]


def folder_problem(folder: Path, create: bool = True) -> Optional[str]:
    """Why no file can be written in `folder` (created first when `create`), or None when one can.

    It tries: permission bits do not tell for root, read-only mounts or full disks.
    """
    folder = Path(folder)
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        elif not folder.is_dir():
            return f"{folder} is not a folder" if folder.exists() else f"{folder} does not exist"
        fd, probe = tempfile.mkstemp(prefix=".nsightwrap-write-check-", dir=folder)
    except OSError as e:
        return f"{e.strerror or e} ({e.filename or folder})"
    os.close(fd)
    os.unlink(probe)
    return None

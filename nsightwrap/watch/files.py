"""Files written safely: can a file be written there (asked before launching, not found out after a
long run), and a file replaced at once, never seen half-written."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Optional, Union

__all__ = ["folder_problem", "write_atomic"]


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


def write_atomic(path: Union[str, "os.PathLike[str]"], data: Union[str, bytes], *, mode: int = 0o666) -> None:
    """Replace `path` with `data` (text as UTF-8) at once: a reader sees the old file or the new one.

    Written to a temporary file beside it (same folder, so ``os.replace`` is atomic), created with
    `mode` less the umask; on any failure that file is removed and the error raised.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise

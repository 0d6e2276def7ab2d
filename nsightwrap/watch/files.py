"""Files written safely: can a file be written there (asked before launching, not found out after a
long run), a file replaced at once, never seen half-written, and where a profiler's report goes by default
(the same naming for ncu and nsys, each passing its own suffix)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from nsightwrap.paths import make_private_dirs
from nsightwrap.secrets import mask_argv

__all__ = ["DEFAULT_REPORT_DIR", "file_identity", "folder_problem", "keyed_file", "read_keyed", "report_stem",
           "wanted_report", "write_atomic", "write_keyed"]

#: Where reports go unless told (RunConfig.report_dir), relative to the run's folder.
DEFAULT_REPORT_DIR = "nsightwrap-reports"


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
        import tempfile  # here: profile(fn)'s child writes its files without tempfile's imports (shutil, random)

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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
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


# --- a cache of JSON files, each keyed by what it was made from (a tool's binary, a wrapper script) -----------


def file_identity(path: Union[str, "os.PathLike[str]"]) -> dict[str, Any]:
    """A file's identity as a cache key: its real path, mtime and size (a reinstall or an upgrade changes them);
    OSError when it cannot be looked at."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return {"realpath": real, "st_mtime_ns": st.st_mtime_ns, "st_size": st.st_size}


def keyed_file(folder: Path, prefix: str, key: Mapping[str, Any]) -> Path:
    """The cache file of `key` in `folder`: PREFIX-DIGEST.json."""
    import hashlib  # here, as tempfile above

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return Path(folder) / f"{prefix}-{digest}.json"


def read_keyed(file: Path, version: int, key: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The cached document when it is of this version and key, else None (a bad cache never stops anything)."""
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != version or data.get("key") != dict(key):
        return None
    return data


def write_keyed(file: Path, version: int, key: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    """`payload` cached with its version and key (written whole, in a private folder); a cache is an
    optimisation, so failures are ignored."""
    try:
        make_private_dirs(Path(file).parent)
        write_atomic(file, json.dumps({"format": version, "key": dict(key), **payload}, indent=1))
    except OSError:
        pass


def _slug(command: Sequence[str]) -> str:
    command = mask_argv(command)  # a report's name is written too: no secret in it
    words = [os.path.basename(command[0])] + [os.path.basename(a) for a in command[1:3] if not a.startswith("-")]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(words))[:60] or "run"


def report_stem(command: Sequence[str], report_dir: str, cwd: Optional[str] = None) -> Path:
    """A default report path without suffix: report_dir (relative to cwd)/program-args-time-random.

    The random part keeps runs started in the same second (parallel probes) apart.
    """
    base = Path(report_dir)
    if cwd and not base.is_absolute():
        base = Path(cwd) / base
    return base / f"{_slug(command)}-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"


def wanted_report(given: Optional[str], command: Sequence[str], suffix: str, *, report_dir: str,
                  cwd: Optional[str] = None) -> Path:
    """The path asked for (relative to cwd), or the default one in report_dir with `suffix`."""
    if given:
        wanted = Path(given)
        return Path(cwd) / wanted if cwd and not wanted.is_absolute() else wanted
    stem = report_stem(command, report_dir, cwd)
    return stem.with_name(stem.name + suffix)  # not with_suffix: names hold dots (app.py)

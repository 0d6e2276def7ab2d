"""The report file itself, walked without ncu_report: signature, blocks, processes.

Facts the Python API does not offer are read from the report file itself:
the process (pid, name, host) of each result is in the header of the file
block that holds it. The same walk over the file's blocks catches a file
that is not a report, or was cut short, before ``ncu_report`` sees it
(``ncu_report`` does not fail on those: it quietly returns no results or a
nameless one).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from nsightwrap.errors import ReportError

_MAGIC = b"NVR\x00"
#: File format versions whose block layout was checked against real reports
#: (ncu 2025.3.1 writes 7). For newer ones a failed walk is only trusted
#: when ncu_report's answer looks broken too.
_KNOWN_FORMAT_VERSIONS = range(1, 8)
TRUNCATED_HINT = (
    "The file was cut short (an interrupted copy, a full disk, or ncu still writing it). Copy it again, "
    "or profile again. A partial report from a stopped run is not truncated: ncu finishes the file."
)


@dataclass(frozen=True)
class Process:
    """The profiled process of a block's results, from its header (None where not recorded)."""

    pid: int | None
    host: str | None
    name: str | None


@dataclass(frozen=True)
class FileScan:
    """What the walk over a report's blocks learnt."""

    version: int | None
    processes: tuple[Process, ...] | None  # one per result in file order; None if unknown
    problem: str | None = None  # set when the walk failed and the format is not a known one


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def pb_fields(buf: bytes) -> dict[int, Any]:
    """Top-level fields of a protobuf message (first occurrence of each):
    ints for varints and fixed, bytes for length-delimited. ValueError when
    ``buf`` is not a well-formed message."""
    fields: dict[int, Any] = {}
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ValueError("field runs past the end")
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            if i + 8 > n:
                raise ValueError("field runs past the end")
            value, i = struct.unpack_from("<Q", buf, i)[0], i + 8
        elif wire == 5:
            if i + 4 > n:
                raise ValueError("field runs past the end")
            value, i = struct.unpack_from("<I", buf, i)[0], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(number, value)
    return fields


def _text(value: Any) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else None


def _process_of(header: Mapping[int, Any]) -> Process:
    raw = header.get(6)
    if not isinstance(raw, bytes):
        return Process(None, None, None)
    try:
        info = pb_fields(raw)
    except ValueError:
        return Process(None, None, None)
    pid = info.get(1)
    return Process(pid if isinstance(pid, int) else None, _text(info.get(2)), _text(info.get(3)))


def check_report_file(report: Path) -> FileScan:
    """Fail early, naming the cause, for a file that is missing, not a report,
    or truncated; else learn the process of each result.

    A report is ``NVR\\0``, a u32 size and a FileHeader message, then blocks:
    a u32 size, a BlockHeader message (1 NumSources, 2 NumResults, 5
    PayloadSize, 6 Process {1 pid, 2 host, 3 name}, 7 range results), and
    PayloadSize bytes of payload. A complete file ends exactly at a block end.
    """
    try:
        size = report.stat().st_size
    except FileNotFoundError:
        raise ReportError(report, "no such file",
                          "Check the path; ncu writes NAME.ncu-rep where -o/--export NAME says.") from None
    except OSError as exc:
        raise ReportError(report, f"cannot be read ({exc.strerror or exc})",
                          "Check the path and its permissions.") from exc
    if not report.is_file():
        raise ReportError(report, "is not a file", "Give the path of the .ncu-rep file itself.")
    if size == 0:
        raise ReportError(report, "is empty (0 bytes)",
                          "ncu was stopped before it wrote anything, or the copy failed; profile again.")
    try:
        with open(report, "rb") as fh:
            return _walk_blocks(report, fh, size)
    except OSError as exc:
        raise ReportError(report, f"cannot be read ({exc.strerror or exc})", "Check the file's permissions.") from exc


def _walk_blocks(report: Path, fh: io.BufferedReader, size: int) -> FileScan:
    head = fh.read(8)
    if head[:4] != _MAGIC:
        if report.suffix == ".ncu-repz":
            return FileScan(None, None)  # compressed: left to ncu_report
        raise ReportError(
            report,
            f"is not an Nsight Compute report: it does not start with the report signature (it starts with {head!r})",
            "Pass the .ncu-rep file that ncu wrote with -o/--export; `ncu --import FILE` tells whether ncu "
            "can open it.",
        )
    if len(head) < 8:
        raise ReportError(report, f"is truncated: it ends inside the file header ({size:,} bytes)", TRUNCATED_HINT)
    (header_size,) = struct.unpack_from("<I", head, 4)
    header = fh.read(header_size)
    if len(header) < header_size:
        raise ReportError(report, f"is truncated: it ends inside the file header ({size:,} bytes)", TRUNCATED_HINT)
    try:
        version = pb_fields(header).get(1)
    except ValueError:
        version = None
    known = isinstance(version, int) and version in _KNOWN_FORMAT_VERSIONS

    processes: list[Process] = []
    offset, block = 8 + header_size, 0
    problem = None
    while offset < size and problem is None:
        if size - offset < 4:
            problem = f"is truncated: it ends {size - offset} byte(s) into the size of block {block} at byte {offset:,}"
            break
        fh.seek(offset)
        (block_header_size,) = struct.unpack("<I", fh.read(4))
        if offset + 4 + block_header_size > size:
            problem = (f"is truncated: block {block} at byte {offset:,} has a {block_header_size:,}-byte header, "
                       f"but the file ends at byte {size:,}")
            break
        try:
            fields = pb_fields(fh.read(block_header_size))
        except ValueError as exc:
            problem = f"is damaged: the header of block {block} at byte {offset:,} cannot be read ({exc})"
            break
        payload = fields.get(5, 0)
        end = offset + 4 + block_header_size + (payload if isinstance(payload, int) else 0)
        if end > size:
            problem = (f"is truncated: block {block} at byte {offset:,} needs {end - offset:,} bytes, "
                       f"but the file ends at byte {size:,}")
            break
        results = sum(v for v in (fields.get(2, 0), fields.get(7, 0)) if isinstance(v, int))
        if results:
            processes.extend([_process_of(fields)] * results)
        offset, block = end, block + 1

    if problem is None:
        return FileScan(version, tuple(processes))
    if known:
        raise ReportError(report, f"{problem} (the file is {size:,} bytes)",
                          TRUNCATED_HINT if "truncated" in problem else
                          "Copy the file again, or profile again; `ncu --import FILE` may say more.")
    return FileScan(version, None, problem)

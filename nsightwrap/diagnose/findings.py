"""compute-sanitizer's text output, read as it comes: findings and summary lines.

Every line compute-sanitizer writes starts with ``========= `` (FACTS.md, compute-sanitizer 2025.3.1). A
finding is a header line right after the prefix (``Invalid __global__ read of size 16 bytes``, ``Error: Race
reported between Write access at ...``, ``Uninitialized __global__ memory read of size 4 bytes``, ``Barrier
error detected. ...``) followed by indented lines (``at KERNEL(ARGS)+0x60 in FILE.cu:14``, ``by thread
(0,0,0) in block (0,0,0)``, ``Access to 0x... is ...``, ``Host Frame: ...``) and ends at a bare
``========= `` line or the next header. Lines without the prefix are the program's own output (a program's
line cut by one of compute-sanitizer's is split off).

FindingsParser is fed text in any pieces (a line cut in two is joined) and yields each finding as soon as it
is complete, so a run stopped mid-way keeps every finding printed before the stop (`close` ends the last one).
The DataFrame schema is COLUMNS, one row per finding.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

__all__ = ["COLUMNS", "Finding", "FindingsParser", "Summary", "findings_frame", "parse_text"]

PREFIX = "========="
#: compute-sanitizer's prefix after a program's unfinished line (not inside a longer row of "=").
_MID_LINE = re.compile(r"(?<!=)========= ")
#: A finding's body lines are indented by at least this many spaces after the prefix.
_BODY_INDENT = 2

#: The DataFrame's columns, one row per finding (STYLE 11):
#:  tool: memcheck | racecheck | synccheck | initcheck
#:  severity: "error" or "warning" (racecheck's Error:/Warning:; every other finding is an error)
#:  kind: what was found, without its size: "Invalid __global__ read", "Race Read/Write", "RAW hazard",
#:        "Uninitialized __global__ memory read", "Barrier error detected. Divergent thread(s) in warp",
#:        "CUDA error cudaErrorLaunchFailure on cudaDeviceSynchronize"
#:  kernel: the kernel as compute-sanitizer prints it (demangled, with its parameters), or None
#:  size: the access size in bytes, or None;  address: "0x..." of the access (or the shared-memory hazard)
#:  thread, block: "(x,y,z)" of the (first) thread named
#:  file, line: the source location (`at ... in FILE:LINE`; with -lineinfo), or None
#:  other_file, other_line: a race's or hazard's second access
#:  hazards: the count a race report gives (`[32768 hazards]`), else None
#:  host_frames: the host backtrace at the launch, innermost first, joined by " <- "
#:  device_frames: the device call stack (`Device Frame:` lines), joined by " <- "
#:  detail: the other body lines (`Access to 0x... is out of bounds`, ...), joined by "; "
#:  message: the header line as printed
COLUMNS = ("tool", "severity", "kind", "kernel", "size", "address", "thread", "block", "file", "line",
           "other_file", "other_line", "hazards", "host_frames", "device_frames", "detail", "message")

_SIZE = re.compile(r"^(?P<kind>.*?) of size (?P<size>[\d,]+) bytes?\.?$")
_AT = re.compile(r"^at (?P<where>.+?)(?: in (?P<file>\S+?):(?P<line>\d+))?$")
_FUNC = re.compile(r"^(?P<func>.+?)\+0x[0-9a-fA-F]+$")
_BY = re.compile(r"^by thread (?P<thread>\([^)]*\)) in block (?P<block>\([^)]*\))")
_ADDRESS = re.compile(r"^(?:Access to|Address) (?P<address>0x[0-9a-fA-F]+)")
_RACE = re.compile(r"^(?:(?P<sev>Error|Warning): )?Race reported between (?P<a>\w+) access at (?P<where>.+?)"
                   r"(?: in (?P<file>\S+?):(?P<line>\d+))?$")
_RACE_OTHER = re.compile(r"^and (?P<b>\w+) access at (?P<where>.+?)(?: in (?P<file>\S+?):(?P<line>\d+))?"
                         r"(?: \[(?P<hazards>[\d,]+) hazards?\])?$")
_HAZARD = re.compile(r"^(?:(?P<sev>Error|Warning): )?(?:\(?Potential\)? )?(?P<kind>\w+) hazard detected at "
                     r"(?P<space>\S+) (?P<address>0x[0-9a-fA-F]+) in block (?P<block>\([^)]*\))")
_HAZARD_THREAD = re.compile(r"^(?P<access>\w+) Thread (?P<thread>\([^)]*\)) at (?P<where>.+?)"
                            r"(?: in (?P<file>\S+?):(?P<line>\d+))?$")
_PROGRAM_HIT = re.compile(r"^Program hit (?P<error>\w+) \(error \d+\) due to \"(?P<why>[^\"]*)\""
                          r"(?: on CUDA API call to (?P<call>\w+))?")
_ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (?P<n>[\d,]+) errors?$")
_NOT_PRINTED = re.compile(r"^ERROR SUMMARY: (?P<n>[\d,]+) errors? were not printed")
_RACE_SUMMARY = re.compile(r"^RACECHECK SUMMARY: (?P<shown>[\d,]+) hazards? displayed "
                           r"\((?P<errors>[\d,]+) errors?, (?P<warnings>[\d,]+) warnings?\)")
#: Lines of compute-sanitizer's that are neither findings nor summaries.
_NOTES = ("COMPUTE-SANITIZER", "Target application returned an error", "LEAK SUMMARY", "Internal Sanitizer Error",
          "Error: No attachable process", "Error: Target application terminated",
          "Error: process didn't terminate successfully")
#: Notes that say the program failed (its exit status, a signal).
_PROGRAM_FAILED = ("Target application returned an error", "Error: process didn't terminate successfully")


def _int(text: Optional[str]) -> Optional[int]:
    return None if text is None else int(text.replace(",", ""))


def _func(where: str) -> str:
    """The function of `KERNEL(ARGS)+0x60` (a bare `0x58` names none: returned as is)."""
    m = _FUNC.match(where)
    return m["func"] if m else where


@dataclass
class Finding:
    """One finding; its fields are COLUMNS."""

    tool: str
    kind: str
    message: str
    severity: str = "error"
    kernel: Optional[str] = None
    size: Optional[int] = None
    address: Optional[str] = None
    thread: Optional[str] = None
    block: Optional[str] = None
    file: Optional[str] = None
    line: Optional[int] = None
    other_file: Optional[str] = None
    other_line: Optional[int] = None
    hazards: Optional[int] = None
    host_frames: list[str] = field(default_factory=list)
    device_frames: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """`file.cu:19` (the file's base name), or "" without line info."""
        if not self.file:
            return ""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}" if self.line is not None else self.file

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d["host_frames"] = " <- ".join(self.host_frames)
        d["device_frames"] = " <- ".join(self.device_frames)
        d["detail"] = "; ".join(self.detail)
        return {c: d[c] for c in COLUMNS}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Summary:
    """The summary lines: `ERROR SUMMARY: N errors`, racecheck's `N hazards displayed (E errors, W warnings)`,
    and `N errors were not printed` (beyond --print-limit). None where the line did not come (a stopped run)."""

    errors: Optional[int] = None
    hazards_displayed: Optional[int] = None
    hazard_errors: Optional[int] = None
    hazard_warnings: Optional[int] = None
    not_printed: Optional[int] = None
    program_error: bool = False  # "Target application returned an error"
    lines: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """A summary line came: compute-sanitizer reached its end."""
        return self.errors is not None or self.hazards_displayed is not None

    @property
    def count(self) -> Optional[int]:
        """What the tool counted: errors, or racecheck's errors + warnings (counted, not only displayed)."""
        if self.hazards_displayed is not None:
            return (self.hazard_errors or 0) + (self.hazard_warnings or 0)
        return self.errors

    def take(self, body: str) -> bool:
        """Read a summary or note line; False when `body` is neither."""
        m = _NOT_PRINTED.match(body)
        if m:
            self.not_printed = _int(m["n"])
        elif (m := _ERROR_SUMMARY.match(body)):
            self.errors = _int(m["n"])
        elif (m := _RACE_SUMMARY.match(body)):
            self.hazards_displayed = _int(m["shown"])
            self.hazard_errors, self.hazard_warnings = _int(m["errors"]), _int(m["warnings"])
        elif body.startswith(_NOTES):
            self.program_error = self.program_error or body.startswith(_PROGRAM_FAILED)
        else:
            return False
        self.lines.append(body)
        return True


class FindingsParser:
    """Feed compute-sanitizer's text in any pieces; complete findings come back as they end."""

    def __init__(self, tool: str):
        self.tool = tool
        self.summary = Summary()
        self.findings: list[Finding] = []
        self.program_lines = 0  # lines without the prefix: the program's own output
        self._partial = ""
        self._open: Optional[Finding] = None
        self._in_backtrace = False

    def feed(self, text: str) -> list[Finding]:
        """The findings completed by `text` (a line cut at the end waits for its rest)."""
        done: list[Finding] = []
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for raw in lines:
            self._line(raw.rstrip("\r"), done)
        return done

    def close(self) -> list[Finding]:
        """The end of the output: the last line and the finding still open."""
        done: list[Finding] = []
        if self._partial:
            self._line(self._partial.rstrip("\r"), done)
            self._partial = ""
        self._end(done)
        return done

    # -- one line ----------------------------------------------------------

    def _line(self, raw: str, done: list[Finding]) -> None:
        m = _MID_LINE.search(raw, 1)
        if m:  # the program's unfinished line, then compute-sanitizer's (two writers on one pipe)
            self._line(raw[:m.start()], done)
            raw = raw[m.start():]
        if raw != PREFIX and not raw.startswith(PREFIX + " "):  # "==========" of a program's banner is its own
            if raw.strip():
                self.program_lines += 1
            return
        rest = raw[len(PREFIX):]
        body = rest.strip()
        if not body:
            self._end(done)  # the blank `=========` line ends a finding
            return
        indent = len(rest) - len(rest.lstrip(" "))
        if indent > _BODY_INDENT:
            if self._open is not None:
                self._body(self._open, body)
            else:  # a note's own lines, or a finding whose header was cut off: no finding of their own
                self.summary.lines.append(body)
            return
        self._end(done)
        if self.summary.take(body):
            return
        self._open = self._header(body)

    def _end(self, done: list[Finding]) -> None:
        if self._open is not None:
            done.append(self._open)
            self.findings.append(self._open)
        self._open, self._in_backtrace = None, False

    def _header(self, body: str) -> Finding:
        f = Finding(self.tool, kind=body.rstrip(". :"), message=body)
        if (m := _RACE.match(body)):
            f.severity = (m["sev"] or "Error").lower()
            f.kind, f.kernel = f"Race {m['a']}/?", _func(m["where"])
            f.file, f.line = m["file"], _int(m["line"])
        elif (m := _HAZARD.match(body)):
            f.severity = (m["sev"] or "Error").lower()
            f.kind, f.address, f.block = f"{m['kind']} hazard", m["address"], m["block"]
        elif (m := _PROGRAM_HIT.match(body)):
            f.kind = f"CUDA error {m['error']}" + (f" on {m['call']}" if m["call"] else "")
            f.detail.append(m["why"])
        elif (m := _SIZE.match(body)):
            f.kind, f.size = m["kind"], _int(m["size"])
        return f

    def _body(self, f: Finding, body: str) -> None:
        if body.startswith("Host Frame:"):
            f.host_frames.append(body[len("Host Frame:"):].strip())
        elif body.startswith("Device Frame:"):
            frame = body[len("Device Frame:"):].strip()
            f.device_frames.append(frame)
            f.kernel = _func(frame.split(" in ")[0])  # the outermost frame seen so far: the kernel
            m = re.search(r" in (\S+?):(\d+)$", frame)
            if m and (f.file or "").endswith((".h", ".hpp")):  # inside an intrinsic: the kernel's own line
                f.detail.append(f"at {f.where}")
                f.file, f.line = m.group(1), int(m.group(2))
        elif body.startswith("Saved host backtrace"):
            self._in_backtrace = True
        elif (m := _RACE_OTHER.match(body)):
            f.kind = f.kind.replace("/?", f"/{m['b']}")
            f.other_file, f.other_line, f.hazards = m["file"], _int(m["line"]), _int(m["hazards"])
        elif (m := _HAZARD_THREAD.match(body)):
            self._hazard_thread(f, m)
        elif (m := _AT.match(body)) and f.file is None and f.kernel is None:
            f.kernel, f.file, f.line = _func(m["where"]), m["file"], _int(m["line"])
        elif (m := _BY.match(body)) and f.thread is None:
            f.thread, f.block = m["thread"], m["block"]
        else:
            if (m := _ADDRESS.match(body)) and f.address is None:
                f.address = m["address"]
            f.detail.append(body)

    @staticmethod
    def _hazard_thread(f: Finding, m: re.Match) -> None:
        """`Read Thread (3,0,0) at KERNEL+0x1c0 in FILE:22`: the first names the finding's thread and line."""
        if f.thread is None:
            f.thread, f.kernel, f.file, f.line = m["thread"], _func(m["where"]), m["file"], _int(m["line"])
        else:
            f.other_file, f.other_line = m["file"], _int(m["line"])
        f.detail.append(f"{m['access']} thread {m['thread']}")


def findings_frame(findings: Iterable[Finding]) -> Any:
    """The findings as a pandas DataFrame with COLUMNS (one row per finding; empty with the columns)."""
    import pandas as pd  # the reports layer's dependency; imported when a frame is asked for

    return pd.DataFrame([f.row() for f in findings], columns=list(COLUMNS))


def parse_text(text: str, tool: str) -> tuple[list[Finding], Summary]:
    """All findings and the summary of a complete (or cut) output."""
    parser = FindingsParser(tool)
    parser.feed(text)
    parser.close()
    return parser.findings, parser.summary

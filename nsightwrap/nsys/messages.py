"""What nsys prints when it fails: it exits 0 on several failures, so they are read from its output.

- "Importer error status" / "skipping importation of the QDSTRM file": the
  trace was taken but QdstrmImporter could not start (on the GPU machine the
  nsys bundled with Nsight Compute lacks libdw.so.1): a `.qdstrm` is left
  instead of a `.nsys-rep` (see nsight-reference transcripts);
- "already exists" / "--force-overwrite": the output file existed;
- "could not be found" / "Report ... not found": an unknown stats report;
- "No such file": a missing program or file.
"""

from __future__ import annotations

import re
from typing import Iterable, Union

IMPORTER_FAILED = ("Importer error status", "skipping importation of the QDSTRM file")
EXISTS = ("already exists", "use --force-overwrite", "--force-overwrite true", "--force-overwrite=true")
UNKNOWN_REPORT = (re.compile(r"could not be found", re.I), re.compile(r"\bReport\b.*\bnot found", re.I))
NO_SUCH_FILE = "No such file"
ERROR_LINE = re.compile(r"^\s*(?:ERROR|Error)\b[:\s]")
APP_FAILED = re.compile(
    r"(?:application|process|target)\b[^\n]*?(?:returned|exited with)[^\n]*?(?:exit )?code[:\s]+(-?\d+)", re.I)


def lines_with(log: str, needles: Iterable[Union[str, "re.Pattern[str]"]]) -> list[str]:
    """The stripped lines of ``log`` that hold one of ``needles`` (text, case-insensitive, or a pattern)."""
    needles = list(needles)
    out = []
    for line in log.splitlines():
        s = line.strip()
        if not s:
            continue
        for n in needles:
            if (n.search(s) if isinstance(n, re.Pattern) else n.lower() in s.lower()):
                out.append(s)
                break
    return out

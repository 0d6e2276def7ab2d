"""GPU machine: which ncu_report module nsightwrap picks for the installed ncu, and why.

    python3 devtools/extras_probe.py [/usr/local/cuda/bin/ncu]
"""
import os
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ncu = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/bin/ncu"
print("ncu:", ncu, "-> realpath", os.path.realpath(ncu), "; symlink:", os.path.islink(ncu))
print(subprocess.run(["file", os.path.realpath(ncu)], capture_output=True, text=True).stdout.strip())
with open(os.path.realpath(ncu), "rb") as f:
    head = f.read(400)
print("head:", head[:400] if head.startswith(b"#!") else head[:4])

from nsightwrap.reports.ncu.module import choose_reader, find_report_module  # noqa: E402

found = find_report_module(ncu)
print("find_report_module:", found)
try:
    r = choose_reader(ncu)
    print("nsightwrap chooses:", r.kind, r.origin)
except Exception:
    traceback.print_exc()
if found:
    print("extras folder:", sorted(os.listdir(found.parent)))
    # The extras module imported plainly, in a fresh process, to see its own error.
    code = (f"import sys; sys.path.insert(0, {str(found.parent)!r}); import ncu_report; "
            "print('plain import ok', ncu_report.__file__)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print(p.stdout + p.stderr[-3000:])

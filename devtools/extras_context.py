"""GPU machine: does reading with the extras ncu_report crash because of the report or of the process?

    python3 devtools/extras_context.py APP OUTDIR
Step 1 (this process): a watched run (profile_command), then load_report of its report.
Each read also runs in a fresh process first, so a crash here names its cause.
"""
import faulthandler
import os
import subprocess
import sys

faulthandler.enable()
sys.path.insert(0, os.getcwd())
from nsightwrap import ProfileOptions, RunConfig, profile_command  # noqa: E402

app, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
a = profile_command([app, "two"], ProfileOptions(set="basic"), RunConfig(report_dir=out))
print("watched run:", a.status, a.report, flush=True)
fresh = "import faulthandler, sys; faulthandler.enable(); sys.path.insert(0, '.'); from nsightwrap.report import load_report; " \
        f"df = load_report({a.report!r}); print('fresh process:', df.attrs['reader'], df.shape)"
p = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True)
print(f"fresh rc={p.returncode}: {p.stdout}{p.stderr[-2500:]}", flush=True)
import threading  # noqa: E402
print("threads alive:", [t.name for t in threading.enumerate()], flush=True)
print("modules with native code:", sorted(n for n, m in sys.modules.items()
                                          if getattr(m, "__file__", "") and str(m.__file__).endswith(".so"))[:40], flush=True)
from nsightwrap.report import _choose_reader, load_report  # noqa: E402
print("reader:", _choose_reader(None), flush=True)
df = load_report(a.report)
print("same process:", df.attrs["reader"], df.shape, flush=True)

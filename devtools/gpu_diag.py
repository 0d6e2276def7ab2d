"""GPU machine: find why the H100 walk of `app third` went wrong (2026-11-26), with every output kept.

Usage: python3 devtools/gpu_diag.py OUTDIR APP
Checks, each under a time limit and followed by a GPU check:
  - raw ncu with the walk's lookahead exclusion regex (does ncu accept it? which launches does it keep?)
  - raw ncu with a partial regex (does regex: match anywhere in the name?)
  - PyTorch matmul+softmax kernel names as ncu prints them
  - the watched run of the hanging kernel alone (SpeedOfLight), with its log
  - the test's ladder walk, every attempt's command, status and log
  - after each step: can ncu still profile a trivial program (the H100 run broke with
    "Unknown Error on device 0")?
"""

import subprocess
import sys
import time
from pathlib import Path

OUT = Path(sys.argv[1])
APP = sys.argv[2]
NCU = "/usr/local/cuda/bin/ncu"
ROOT = Path(__file__).resolve().parents[1]
OUT.mkdir(parents=True, exist_ok=True)
T0 = time.monotonic()
summary = open(OUT / "diag.txt", "a")


def say(text):
    line = f"[{time.monotonic() - T0:7.1f}] {text}"
    print(line, flush=True)
    summary.write(line + "\n")
    summary.flush()


def sh(name, argv, limit):
    t = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=limit, cwd="/tmp", start_new_session=True)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
        subprocess.run(["pkill", "-9", "-f", APP])
    took = time.monotonic() - t
    (OUT / f"{name}.log").write_text(" ".join(argv) + "\n" + out)
    say(f"{name}: rc={rc} in {took:.1f} s")
    for line in out.splitlines():
        if "==PROF== Profiling" in line or "==ERROR==" in line or "==WARNING==" in line:
            say(f"    {line[:200]}")
    return out


def gpu(after):
    held = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    say(f"GPU after {after}: {held or 'no compute process'}")
    if held:
        for line in held.splitlines():
            subprocess.run(["kill", "-9", line.split(",")[0]])
        time.sleep(3)
    out = sh(f"canary-{after}", [NCU, "--metrics", "gpu__time_duration.sum", APP, "two"], 60)
    say(f"canary after {after}: {'PROFILES' if out.count('==PROF== Profiling') == 2 else 'BROKEN'}")


gpu("start")
sh("regex-exclude-skip2", [NCU, "--set", "basic", "--kernel-name", "regex:^(?!(?:wait_for_host)$).*",
                           "--launch-skip", "2", APP, "third", "20"], 60)
sh("regex-exclude", [NCU, "--set", "basic", "--kernel-name", "regex:^(?!(?:wait_for_host)$).*", APP, "third", "20"], 60)
sh("regex-partial", [NCU, "--metrics", "gpu__time_duration.sum", "--kernel-name", "regex:reduc", APP, "ok"], 60)
sh("torch-names", [NCU, "--metrics", "gpu__time_duration.sum", "--profile-from-start", "off",
                   sys.executable, str(ROOT / "tests/gpu/workloads.py"), "2048"], 150)
gpu("raw")

sys.path.insert(0, str(ROOT))
from nsightwrap import HangStore, ProfileOptions, RunConfig, walk_ladder  # noqa: E402
from nsightwrap.fallback.ladder import ladder_from_dict  # noqa: E402
from nsightwrap.fallback.session import Session  # noqa: E402
from nsightwrap.ncu.engine import profile_command  # noqa: E402
from nsightwrap.ncu.options import KernelFilter  # noqa: E402

cfg = RunConfig(ncu=NCU, stall_timeout=5.0, timeout=60.0, report_dir=str(OUT / "reports"))
t = time.monotonic()
a = profile_command([APP, "third", "30"], ProfileOptions(sections=("SpeedOfLight",),
                                                         kernel=KernelFilter("wait_for_host")), cfg)
say(f"watched SOL wait_for_host: {a.status} in {time.monotonic() - t:.1f} s; {a.reason}")
(OUT / "watched-sol.json").write_text(a.to_json(indent=1))
gpu("watched-sol")

ladder = ladder_from_dict({"name": "gpu-test", "rungs": [
    {"name": "requested", "requested": True},
    {"name": "speed-of-light", "sections": ["SpeedOfLight"]},
    {"name": "range-replay", "sections": ["SpeedOfLight"], "replay_mode": "range"}]})
store = HangStore(OUT / "hangs.db")
for i in range(2):
    t = time.monotonic()
    r = walk_ladder(Session.open([APP, "third", "30"], cfg.replace(timeout=60.0), store=store),
                    ProfileOptions(set="basic"), ladder)
    say(f"walk {i + 1}: {time.monotonic() - t:.1f} s\n{r.summary()}")
    for j, at in enumerate(r.attempts):
        (OUT / f"walk{i + 1}-attempt{j}.json").write_text(at.to_json(indent=1))
        say(f"   attempt {j}: {' '.join(at.command)} -> {at.status} ({at.reason})")
    if len(r.df):
        say(r.df[["function", "rung"]].to_string())
    gpu(f"walk{i + 1}")
say("done")

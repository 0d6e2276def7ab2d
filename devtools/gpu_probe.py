#!/usr/bin/env python3
"""Probe how ncu behaves on the GPU machine (stdlib only; run there).

Records every experiment as a transcript (JSON lines: t, out / events) in
OUTDIR, snapshots the process tree during hangs, and tries different ways
of stopping ncu. Every process it starts carries a cookie and is killed by
cookie at the end of each experiment.
"""
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid

NCU = os.environ.get("NCU", "/usr/local/cuda/bin/ncu")
OUT = sys.argv[1]
APP = sys.argv[2]
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "probe.log"), "a")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


def procs_with(cookie):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
        except OSError:
            continue
        if f"NSIGHTWRAP_RUN={cookie}".encode() in env.split(b"\0"):
            found.append(int(d))
    return found


def describe(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        rp = stat.rindex(")")
        comm = stat[stat.index("(") + 1:rp]
        f = stat[rp + 2:].split()
        ppid, pgid, sid = int(f[1]), int(f[2]), int(f[3])
        state = f[0]
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:4]
        return dict(pid=pid, ppid=ppid, pgid=pgid, sid=sid, state=state, comm=comm,
                    cmd=[c.decode(errors="replace") for c in cmd if c])
    except OSError:
        return dict(pid=pid, gone=True)


def gpu_apps():
    try:
        return subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"nvidia-smi failed: {e}"


def kill_cookie(cookie):
    for sig in (signal.SIGKILL,):
        for p in procs_with(cookie):
            try:
                os.kill(p, sig)
            except OSError:
                pass
    time.sleep(0.5)
    left = procs_with(cookie)
    return left


def experiment(name, argv, plan=None, total=120, cwd=None):
    """plan: callable(state) invoked each tick; may send signals."""
    cookie = uuid.uuid4().hex
    env = dict(os.environ, NSIGHTWRAP_RUN=cookie)
    t0 = time.monotonic()
    rec = []
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True, cwd=cwd)
    log(f"\n=== {name}: {' '.join(argv)} (pid {p.pid}, cookie {cookie[:8]})")
    fd = p.stdout.fileno()
    os.set_blocking(fd, False)
    state = dict(name=name, p=p, cookie=cookie, t0=t0, last_out=t0, text="", rec=rec, done=False, eof=False)
    while True:
        now = time.monotonic()
        if now - t0 > total:
            rec.append({"t": round(now - t0, 3), "note": "total limit"})
            break
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                b = os.read(fd, 65536)
            except BlockingIOError:
                b = None
            if b == b"":
                state["eof"] = True
            elif b:
                s = b.decode(errors="replace")
                rec.append({"t": round(time.monotonic() - t0, 3), "out": s})
                state["text"] += s
                state["last_out"] = time.monotonic()
        if plan:
            plan(state)
        if state["eof"] and p.poll() is not None:
            break
        if state.get("stop"):
            break
    rc = p.poll()
    rec.append({"t": round(time.monotonic() - t0, 3), "status": "exited" if rc is not None else "running", "rc": rc})
    left = procs_with(cookie)
    rec.append({"t": round(time.monotonic() - t0, 3), "left_before_cleanup": [describe(x) for x in left]})
    still = kill_cookie(cookie)
    rec.append({"t": round(time.monotonic() - t0, 3), "left_after_sigkill": still, "gpu_apps": gpu_apps()})
    with open(os.path.join(OUT, name + ".jsonl"), "w") as f:
        for r in rec:
            f.write(json.dumps(r) + "\n")
    log(state["text"][-3000:])
    log(f"--- rc={rc} left={len(left)} still={still} t={time.monotonic()-t0:.1f}s")
    return state


def hang_plan(target_pick, sig, report_base):
    """Once output is silent for 5 s after a kernel started, snapshot and send sig to target_pick."""
    def plan(st):
        now = time.monotonic()
        t = now - st["t0"]
        if "sent" not in st and "Profiling" in st["text"] and now - st["last_out"] > 5:
            tree = [describe(x) for x in procs_with(st["cookie"])]
            st["rec"].append({"t": round(t, 3), "tree": tree, "gpu_apps": gpu_apps(),
                              "report_files": {f: os.path.getsize(f) for f in glob.glob(report_base + "*")}})
            log("TREE:", json.dumps(tree, indent=None))
            log("REPORT FILES before signal:", {f: os.path.getsize(f) for f in glob.glob(report_base + "*")})
            ncus = [d for d in tree
                    if not d.get("gone") and (d["comm"] == "ncu" or (d["cmd"] and d["cmd"][0].endswith("ncu")))]
            if target_pick == "outer":
                pid = st["p"].pid
            elif target_pick == "inner":
                pid = ncus[-1]["pid"] if len(ncus) > 1 else st["p"].pid
                # innermost: an ncu that is not a parent of another ncu
                parents = {d["ppid"] for d in ncus}
                inner = [d for d in ncus if d["pid"] not in parents]
                pid = inner[0]["pid"] if inner else pid
            os.kill(pid, sig)
            st["sent"] = now
            st["rec"].append({"t": round(t, 3), "sent": signal.Signals(sig).name, "to": pid, "which": target_pick})
            log(f"SENT {signal.Signals(sig).name} to {target_pick} pid {pid} at {t:.2f}s")
        if "sent" in st:
            alive = [d["pid"] for d in (describe(x) for x in procs_with(st["cookie"]))
                     if not d.get("gone") and d.get("state") != "Z"]
            files = {f: os.path.getsize(f) for f in glob.glob(report_base + "*")}
            key = (tuple(alive), tuple(sorted(files.items())))
            if key != st.get("lastkey"):
                st["lastkey"] = key
                st["rec"].append({"t": round(t, 3), "alive": alive, "report_files": files})
                log(f"  t={t:.2f} alive={alive} files={files}")
            if now - st["sent"] > 15:
                st["stop"] = True
    return plan


def main():
    neutral = "/tmp/nw"
    os.makedirs(neutral, exist_ok=True)
    app = os.path.join(neutral, "app")
    shutil.copy(APP, app)
    if len(sys.argv) > 3 and sys.argv[3] == "slow":
        # How a kernel whose single pass outlasts the 3 s warning looks.
        experiment("slow_one_pass_5s", [NCU, "--metrics", "gpu__time_duration.sum", app, "slow", "5000"],
                   cwd=neutral, total=60)
        return
    log("ncu --version:", subprocess.run([NCU, "--version"], capture_output=True, text=True).stdout)
    log("gpu apps before:", gpu_apps())
    experiment("none", [NCU, app, "none"], cwd=neutral)
    experiment("basic_ok", [NCU, "--set", "basic", "-o", f"{OUT}/basic_ok", app, "ok"], cwd=neutral)
    experiment("export_exists", [NCU, "--set", "basic", "-o", f"{OUT}/basic_ok", app, "ok"], cwd=neutral)
    experiment("duration_only", [NCU, "--metrics", "gpu__time_duration.sum", "-o", f"{OUT}/duration", app, "ok"],
               cwd=neutral)
    experiment("slow", [NCU, "--set", "basic", app, "slow", "1500"], cwd=neutral, total=90)
    experiment("range_ok", [NCU, "--replay-mode", "range", "-o", f"{OUT}/range", app, "range"], cwd=neutral)
    for which, sig in (("inner", signal.SIGINT), ("outer", signal.SIGINT), ("inner", signal.SIGTERM)):
        base = f"{OUT}/mixed_{which}_{signal.Signals(sig).name}"
        experiment(f"hang_{which}_{signal.Signals(sig).name}",
                   [NCU, "--set", "basic", "-o", base, app, "mixed", "60"],
                   plan=hang_plan(which, sig, base), cwd=neutral, total=60)
    experiment("full_ok", [NCU, "--set", "full", "-o", f"{OUT}/full_ok", app, "ok"], cwd=neutral, total=120)
    log("gpu apps after:", gpu_apps())


if __name__ == "__main__":
    main()

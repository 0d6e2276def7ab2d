"""How soon does the CUPTI tracer's trace say what happened? Runs COMMAND with the tracer injected, follows
the trace files every 20 ms, and prints each line's lag: for a launch, arrival minus the launch; for a
finished kernel, arrival minus the kernel's end (CUPTI's clock mapped to CLOCK_MONOTONIC by the init line).

    python3 devtools/tracer_lag.py LIB LIMIT_S -- COMMAND...
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    lib, limit = sys.argv[1], float(sys.argv[2])
    cmd = sys.argv[sys.argv.index("--") + 1:]
    d = tempfile.mkdtemp(prefix="tracer-lag-")
    env = dict(os.environ, CUDA_INJECTION64_PATH=lib, NSIGHTWRAP_TRACE_DIR=d)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pos, rest, clock = {}, {}, {}
    while True:
        done = p.poll() is not None or time.monotonic() - t0 > limit
        now = time.monotonic_ns()
        for f in glob.glob(os.path.join(d, "trace-*.jsonl")):
            with open(f, "rb") as fh:
                fh.seek(pos.get(f, 0))
                data = fh.read()
            pos[f] = pos.get(f, 0) + len(data)
            text = rest.get(f, b"") + data
            *lines, rest[f] = text.split(b"\n")
            for line in lines:
                ev = json.loads(line)
                if ev["ev"] == "init":
                    clock[ev["pid"]] = ev["mono_ns"] - ev["cupti_ns"]
                    print(f"{(now - t0 * 1e9) / 1e9:7.3f} init pid {ev['pid']}")
                elif ev["ev"] == "launch":
                    print(f"{(now - t0 * 1e9) / 1e9:7.3f} launch #{ev['seq']} {ev['name'][:60]} lag "
                          f"{(now - ev['mono_ns']) / 1e6:.1f} ms")
                elif ev["ev"] == "kernel":
                    end = ev["end_ns"] + clock.get(ev["pid"], 0)
                    print(f"{(now - t0 * 1e9) / 1e9:7.3f} kernel {ev['name'][:60]} ran "
                          f"{(ev['end_ns'] - ev['start_ns']) / 1e9:.4f} s, lag {(now - end) / 1e6:.1f} ms"
                          f"{' (graph)' if ev['graph'] else ''}")
                else:
                    print(f"{(now - t0 * 1e9) / 1e9:7.3f} {ev}")
        if done:
            break
        time.sleep(0.02)
    if p.poll() is None:
        p.kill()
        p.wait()
        print(f"{time.monotonic() - t0:7.3f} killed at the limit")
    else:
        print(f"{time.monotonic() - t0:7.3f} exited rc={p.returncode}")


if __name__ == "__main__":
    main()

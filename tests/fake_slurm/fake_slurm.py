#!/usr/bin/env -S python3 -S
"""Fake Slurm commands (sbatch, srun, sacct, scancel) for submitit's SlurmExecutor, on this machine.

One script, four names (links). State lives in $FAKE_SLURM_DIR: a job counter, and per task
`ID_I.pid` (the task's process group) and `ID_I.rc` (its exit status once it ended).
sbatch runs each array task of the script at once, in the background, as Slurm's environment
would have it (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_JOB_ID, ...); `#SBATCH --exclude`
is kept in `ID_I.exclude` so tests can see it. FAKE_SLURM_FAIL_FIRST=1 makes the first task
ever started fail at once (a node failure: no result). srun runs its command with --output/--error
(%A %a %j %t filled in). sacct prints JobID|State|NodeList; scancel stops the tasks' groups.
"""
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fake-slurm"))
NODE = "fakenode"


def sbatch(args):
    script = Path(args[-1])
    text = script.read_text()
    opts = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", text, re.M))
    STATE.mkdir(parents=True, exist_ok=True)
    counter = STATE / "counter"
    job = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job))
    array = opts.get("array")
    tasks = range(int(array.split("%")[0].split("-")[1]) + 1) if array else [None]
    for i in tasks:
        name = f"{job}_{i}" if i is not None else str(job)
        env = dict(os.environ, SLURM_JOB_ID=str(job * 1000 + i if i is not None else job), SLURM_NTASKS="1",
                   SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0", SLURM_JOB_NODELIST=NODE, SLURM_PROCID="0",
                   SLURM_LOCALID="0", SLURMD_NODENAME=NODE)
        if i is not None:
            env.update(SLURM_ARRAY_JOB_ID=str(job), SLURM_ARRAY_TASK_ID=str(i))
        (STATE / f"{name}.exclude").write_text(opts.get("exclude") or "")
        first = not (STATE / "started").exists()
        (STATE / "started").touch()
        body = "exit 1" if first and os.environ.get("FAKE_SLURM_FAIL_FIRST") == "1" else f"bash {script}"
        rc = STATE / f"{name}.rc"
        # The body in a subshell: its `exit 1` (a failed task) must not skip writing the rc (sacct: FAILED).
        p = subprocess.Popen(["sh", "-c", f'({body}); echo $? > "{rc}"'], env=env, start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (STATE / f"{name}.pid").write_text(str(p.pid))
    print(f"Submitted batch job {job}")


def srun(args):
    out = err = None
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("--output", "--error"):
            value = args.pop(0)
            for k, v in (("%A", os.environ.get("SLURM_ARRAY_JOB_ID", "")),
                         ("%a", os.environ.get("SLURM_ARRAY_TASK_ID", "")),
                         ("%j", os.environ["SLURM_JOB_ID"]), ("%t", "0")):
                value = value.replace(k, v)
            if flag == "--output":
                out = value
            else:
                err = value
    stdout = open(out, "a") if out else None
    stderr = open(err, "a") if err else stdout
    return subprocess.call(args, stdout=stdout, stderr=stderr)


def _tasks(ids):
    for pid_file in sorted(STATE.glob("*.pid")):
        name = pid_file.stem
        if not ids or name in ids or name.split("_")[0] in ids:
            yield name, int(pid_file.read_text())


def sacct(args):
    ids = [args[i + 1] for i, a in enumerate(args) if a == "-j"]
    print("JobID|State|NodeList")
    for name, _ in _tasks(ids):
        rc = STATE / f"{name}.rc"
        state = "RUNNING" if not rc.exists() else "COMPLETED" if rc.read_text().strip() == "0" else "FAILED"
        if (STATE / f"{name}.cancelled").exists():
            state = "CANCELLED"
        print(f"{name}|{state}|{NODE}")


def scancel(args):
    ids = [a for a in args if not a.startswith("-")]
    for name, pid in _tasks(ids):
        (STATE / f"{name}.cancelled").touch()
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    command = {"sbatch": sbatch, "srun": srun, "sacct": sacct, "scancel": scancel}[Path(sys.argv[0]).name]
    sys.exit(command(sys.argv[1:]) or 0)

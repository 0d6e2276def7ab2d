"""Every process's CPU, exactly, with the command line it ran: how the test suite's CPU is counted (issue 20).

    python3 devtools/proc_cpu.py record OUT.json -- CMD [ARG...]     (as root)
    python3 devtools/proc_cpu.py report OUT.json [--top N]

`record` runs CMD and listens to the kernel meanwhile: the process connector (cn_proc: each fork, and each exec,
whose argv is read from /proc at once) and taskstats (each task's CPU at its exit: sum_exec_runtime, in ns).
`report` adds up the CPU of CMD and everything it started, by what each process ran (a `python -m MODULE`, a
script, a program), threads with their process and a process that never called exec with its parent's.

Linux's process accounting (`accton`, `dump-acct`) is not used for this: it keeps each process's user and system
time in ticks of 10 ms, rounded down, and a suite run is ~3,600 processes of a few ms each. Both at once on the
2-core machine (2026-11-28): the whole suite 115.1 s of CPU there against 127.5 s here, tests/fallback/test_walk.py
alone 2.46 s against 3.29 s.

A process that lives less long than the read of its /proc/PID/cmdline has no command line: it is counted
under `?` with its name. The events of the whole machine are kept in OUT.json, the report keeps CMD's.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

NETLINK_CONNECTOR, NETLINK_GENERIC = 11, 16
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_FORK, PROC_EVENT_EXEC = 1, 2
GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 0x10, 3, 1, 2
TASKSTATS_CMD_GET, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 1, 3
TASKSTATS_TYPE_PID, TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_AGGR_PID = 1, 3, 4
#: Offsets in struct taskstats (linux/taskstats.h, version 8 and later): cpu_run_virtual_total (the task's
#: sum_exec_runtime, ns), ac_comm, ac_ppid.
RUN_NS, COMM, PPID = 72, 80, 132
NLMSG_HDR = struct.Struct("=IHHII")
BUFFER = 64 << 20


def _attr(kind: int, data: bytes) -> bytes:
    size = 4 + len(data)
    return struct.pack("=HH", size, kind) + data + b"\0" * (-size % 4)


def _genl(family: int, cmd: int, attrs: bytes) -> bytes:
    payload = struct.pack("=BBH", cmd, 1, 0) + attrs
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(payload), family, 1 | 4, 1, 0) + payload  # REQUEST | ACK


def _attrs(data: bytes, off: int, end: int):
    while off + 4 <= end:
        size, kind = struct.unpack_from("=HH", data, off)
        if size < 4:
            return
        yield kind & 0x3FFF, off + 4, off + size
        off += (size + 3) & ~3


def _messages(data: bytes):
    off = 0
    while off + NLMSG_HDR.size <= len(data):
        size, kind = struct.unpack_from("=IH", data, off)
        if size < NLMSG_HDR.size:
            return
        yield kind, off + NLMSG_HDR.size, off + size
        off += (size + 3) & ~3


class Listener:
    """The two netlink sockets; events() gives what came as lists: ["f", pid, tgid, parent tgid, t],
    ["e", pid, argv or None, t], ["x", tid, ppid, comm, cpu ns, t]."""

    def __init__(self) -> None:
        self.cn = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        self.cn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        self.cn.bind((os.getpid(), CN_IDX_PROC))
        listen = struct.pack("=IIIIHHI", CN_IDX_PROC, CN_VAL_PROC, 0, 0, 4, 0, PROC_CN_MCAST_LISTEN)
        self.cn.send(NLMSG_HDR.pack(NLMSG_HDR.size + len(listen), 3, 0, 0, os.getpid()) + listen)  # NLMSG_DONE
        self.gn = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self.gn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        self.gn.bind((0, 0))
        self.family = self._taskstats_family()
        cpus = f"0-{os.cpu_count() - 1}\0".encode()
        self.gn.send(_genl(self.family, TASKSTATS_CMD_GET, _attr(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, cpus)))
        self.lost = 0

    def _taskstats_family(self) -> int:
        self.gn.send(_genl(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, _attr(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")))
        data = self.gn.recv(65536)
        for _, start, end in _messages(data):
            for kind, a, _ in _attrs(data, start + 4, end):
                if kind == CTRL_ATTR_FAMILY_ID:
                    return struct.unpack_from("=H", data, a)[0]
        raise SystemExit("proc_cpu: the kernel has no taskstats family (CONFIG_TASKSTATS)")

    def events(self, timeout: float) -> list:
        found: list = []
        ready, _, _ = select.select([self.cn, self.gn], [], [], timeout)
        for sock in ready:
            try:
                data = sock.recv(1 << 20)
            except OSError:  # ENOBUFS: the kernel dropped events
                self.lost += 1
                continue
            now = time.time()
            (self._connector if sock is self.cn else self._taskstats)(data, now, found)
        return found

    @staticmethod
    def _connector(data: bytes, now: float, found: list) -> None:
        for _, start, end in _messages(data):
            event = data[start + 20:end]  # after struct cn_msg
            what = struct.unpack_from("=I", event, 0)[0]
            if what == PROC_EVENT_FORK:
                _, parent_tgid, pid, tgid = struct.unpack_from("=IIII", event, 16)
                found.append(["f", pid, tgid, parent_tgid, now])
            elif what == PROC_EVENT_EXEC:
                pid = struct.unpack_from("=I", event, 16)[0]
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a][:12]
                except OSError:
                    argv = None
                found.append(["e", pid, argv, now])

    def _taskstats(self, data: bytes, now: float, found: list) -> None:
        for kind, start, end in _messages(data):
            if kind != self.family:
                continue
            for outer, a, b in _attrs(data, start + 4, end):  # after the genl header
                if outer != TASKSTATS_TYPE_AGGR_PID:
                    continue
                tid = None
                for inner, c, d in _attrs(data, a, b):
                    if inner == TASKSTATS_TYPE_PID:
                        tid = struct.unpack_from("=I", data, c)[0]
                    elif inner == TASKSTATS_TYPE_STATS:
                        stats = data[c:d]
                        comm = stats[COMM:COMM + 32].split(b"\0")[0].decode(errors="replace")
                        found.append(["x", tid, struct.unpack_from("=I", stats, PPID)[0], comm,
                                      struct.unpack_from("=Q", stats, RUN_NS)[0], now])


def record(out: str, command: list[str]) -> int:
    listener = Listener()
    started = time.time()
    child = subprocess.Popen(command)
    # Ctrl-C reaches the command too (one process group): what it did until it ends is kept. SIGTERM is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    events: list = []
    while child.poll() is None:
        events += listener.events(0.2)
    end = time.time() + 1.0  # the last exits' records
    while time.time() < end:
        events += listener.events(0.1)
    with open(out, "w") as f:
        json.dump({"command": command, "pid": child.pid, "wall_s": time.time() - started - 1.0,
                   "lost_batches": listener.lost, "events": events}, f)
    if listener.lost:
        print(f"proc_cpu: the kernel dropped {listener.lost} batches of events: the counts are low", file=sys.stderr)
    if not any(event[0] == "x" for event in events):  # a user without CAP_NET_ADMIN is told nothing, and hears none
        print("proc_cpu: no task's exit was heard (taskstats): record runs as root", file=sys.stderr)
        return 2
    return child.returncode if child.returncode >= 0 else 128 - child.returncode  # as a shell says a signal


def label(argv: "list[str] | None") -> str:
    """What a process ran, in a few words: `py -m MODULE`, `py DIR/SCRIPT`, `sh DIR/SCRIPT`, a program."""
    if not argv:
        return "?"
    name = os.path.basename(argv[0])
    interpreter = "py" if name.startswith("python") else name if name in ("sh", "bash", "dash", "env") else None
    if interpreter is None:
        return name
    args = argv[1:]
    for flag in ("-m", "-c"):
        if flag in args:
            i = args.index(flag)
            what = args[i + 1] if i + 1 < len(args) else ""
            return f"{interpreter} {flag} {what[:40]}".replace("\n", " ")
    script = next((a for a in args if not a.startswith("-")), "")
    return f"{interpreter} {'/'.join(script.split('/')[-2:])}".rstrip()


def tally(doc: dict) -> tuple[dict, float]:
    """label -> [processes, CPU s] over CMD and what it started, and their total."""
    parent, tgid, labels = {}, {}, {}
    kept = {doc["pid"]}
    rows: dict = collections.defaultdict(lambda: [set(), 0.0])
    for kind, *rest in doc["events"]:
        if kind == "f":
            pid, group, parent_group, _ = rest
            tgid[pid] = group
            if pid == group:
                parent[pid] = parent_group
                if parent_group in kept:
                    kept.add(pid)
                    labels[pid] = "fork of " + labels.get(parent_group, "?").removeprefix("fork of ")
        elif kind == "e":
            pid, argv, _ = rest
            labels[pid] = label(argv)
        else:
            tid, _, comm, ns, _ = rest
            group = tgid.get(tid, tid)
            if group in kept:
                row = rows[labels.get(group, f"? {comm}")]
                row[0].add(group)
                row[1] += ns / 1e9
    table = {k: [len(v[0]), v[1]] for k, v in rows.items()}
    return table, sum(v[1] for v in table.values())


def report(path: str, top: int) -> None:
    with open(path) as f:
        doc = json.load(f)
    table, total = tally(doc)
    print(f"{' '.join(doc['command'])}: {total:.1f} s of CPU in {sum(v[0] for v in table.values())} processes, "
          f"{doc['wall_s']:.1f} s of wall time")
    print(f"{'processes':>9} {'CPU s':>8} {'ms each':>8}  what they ran")
    for what, (count, cpu) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{count:9d} {cpu:8.2f} {1000 * cpu / count:8.1f}  {what}")


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record", help="run a command and record every process's CPU (as root)")
    rec.add_argument("out")
    rec.add_argument("command", nargs=argparse.REMAINDER)
    rep = sub.add_parser("report", help="the CPU of a recorded command and what it started, by what they ran")
    rep.add_argument("path")
    rep.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    if args.action == "report":
        report(args.path, args.top)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("record: no command given (record OUT.json -- CMD ...)")
    return record(args.out, command)


if __name__ == "__main__":
    sys.exit(main())

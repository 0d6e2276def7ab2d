"""A fake CUDA program for the fake ncu: tests/fake_ncu/app.py runs main() (this module's bytecode is cached).

Each argument is one step:
  NAME                 launch kernel NAME
  NAME@hang            ... that hangs whenever the profiler measures it
  NAME@hang-if=A+B|C   ... that hangs when sections A and B, or C, are collected
  NAME@slow=S          ... whose progress marks come S seconds apart
  NAME@slow=S/N        ... in N gaps of S seconds (instead of about 6, merged at random)
  NAME@collective      ... a collective: each rank's half waits for every rank's (under tests/fake_dist)
  NAME@spin=S          ... that runs S seconds alone (without ncu too); under ncu each replay pass
                       takes S x 1.245 (base clocks), one pass in silence between `50%....` and `100%`
  NAME@always          ... that hangs without ncu too (the program's own bug, not ncu's)
  start / stop         cudaProfilerStart / cudaProfilerStop
  graph:A+B@spin=S     one CUDA graph launch of kernels A and B (each NAME or NAME@spin=S)
  print:TEXT           print TEXT;   sleep:S   sleep S seconds;   exit:N   exit with N
  env:NAME             print NAME=its value in this process's environment
  bind:PORT[:DIR]      rank 0 listens on PORT until it exits (a program that fixes its own rendezvous port, as
                       init_method="tcp://...:PORT" does); taken already: the error torch prints, exit 1 (with DIR:
                       first a note `refused.PID` there)
  refused:DIR:S        wait until DIR holds a note of a refused bind, up to S seconds (a rank that holds the port
                       until another run was refused it)
  together:DIR:S       note this rank in DIR under its MASTER_PORT, then wait up to S seconds for a rank of another
                       run of the job (another MASTER_PORT); print "together: ports A B" or "alone: port A"
  stick:PATH           add this process's pid to PATH (FAKE_SMI_STICKY: the fake GPU lists it even once it died)
  zombie:PATH          fork a child that exits at once and is not reaped while this process runs on (a zombie);
                       its pid goes to PATH once it has exited
  bare:PATH            start a child with an empty environment (no cookie) that sleeps 3 s; its pid goes to PATH
  chatty:MS            from now on a thread prints a log line every MS milliseconds
  chatty-cr:MS         ... a tqdm-like bar: "\r 40%|####" without a newline
  flood                write "y\n" as fast as possible, forever
  flood:N              ... N bytes of it, then go on
"""
import os
import sys
import time

import fakecuda  # beside this module (app.py's folder is on sys.path)


def chatty(ms, bar):
    def talk():
        n = 0
        while True:
            n += 1
            text = f"\r {n % 100:3d}%|{'#' * (n % 10):10s}| {n}/100" if bar else f"step {n} loss 0.5\n"
            os.write(1, text.encode())
            time.sleep(ms / 1000)

    import threading  # here: threading costs every other run of the fake 2 ms

    threading.Thread(target=talk, daemon=True).start()


_held = []  # sockets this process listens on (bind:PORT) until it exits


def wait_for(done, seconds):
    """Until done() is true or `seconds` have passed (polled every 20 ms); done()'s last answer."""
    deadline = time.monotonic() + float(seconds)
    while not (answer := done()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return answer


def together(folder, seconds):
    port = os.environ.get("MASTER_PORT", "none")
    open(os.path.join(folder, f"{port}.{os.environ.get('RANK', '0')}"), "w").close()

    def ports_met():
        ports = sorted({name.partition(".")[0] for name in os.listdir(folder)})
        return ports if len(ports) > 1 else None

    ports = wait_for(ports_met, seconds)
    print(f"together: ports {' '.join(ports)}" if ports else f"alone: port {port}", flush=True)


def step(arg):
    if arg.startswith("chatty:") or arg.startswith("chatty-cr:"):
        chatty(float(arg.split(":")[1]), arg.startswith("chatty-cr"))
    elif arg == "flood" or arg.startswith("flood:"):
        chunk = b"y\n" * 32768
        left = int(arg[6:]) if arg.startswith("flood:") else float("inf")
        while left > 0:
            left -= os.write(1, chunk if left >= len(chunk) else chunk[:int(left)])
    elif arg == "start":
        fakecuda.profiler_start()
    elif arg == "stop":
        fakecuda.profiler_stop()
    elif arg.startswith("graph:"):
        nodes = [node.partition("@spin=") for node in arg[6:].split("+")]
        fakecuda.graph_launch([(name, float(spin) if spin else None) for name, _, spin in nodes])
    elif arg.startswith("print:"):
        print(arg[6:], flush=True)
    elif arg.startswith("env:"):
        print(f"{arg[4:]}={os.environ.get(arg[4:], '')}", flush=True)
    elif arg.startswith("stick:"):
        with open(arg[6:], "a") as f:
            f.write(f"{os.getpid()}\n")
    elif arg.startswith("zombie:"):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        while not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].startswith(" Z"):
            time.sleep(0.01)
        with open(arg[7:], "a") as f:
            f.write(f"{pid}\n")
    elif arg.startswith("bare:"):
        import subprocess

        child = subprocess.Popen(["sleep", "3"], env={})
        with open(arg[5:], "a") as f:
            f.write(f"{child.pid}\n")
    elif arg.startswith("bind:"):
        if os.environ.get("RANK", "0") == "0":
            import socket

            port, _, notes = arg[5:].partition(":")
            _held.append(socket.socket())
            try:
                _held[-1].bind(("127.0.0.1", int(port)))
            except OSError:
                if notes:
                    open(os.path.join(notes, f"refused.{os.getpid()}"), "w").close()
                print(f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                      f"network address. port: {port}, code: -98, name: EADDRINUSE", file=sys.stderr, flush=True)
                sys.exit(1)
            _held[-1].listen()
    elif arg.startswith("refused:"):
        folder, seconds = arg[8:].rsplit(":", 1)
        wait_for(lambda: any(n.startswith("refused.") for n in os.listdir(folder)), seconds)
    elif arg.startswith("together:"):
        together(*arg[9:].rsplit(":", 1))
    elif arg.startswith("sleep:"):
        time.sleep(float(arg[6:]))
    elif arg.startswith("exit:"):
        sys.stdout.flush()
        os._exit(int(arg[5:]))
    else:
        name, _, opt = arg.partition("@")
        kw = {}
        if opt == "hang":
            kw["hang"] = True
        elif opt.startswith("hang-if="):
            kw["hang_if"] = [group.split("+") for group in opt[8:].split("|")]
        elif opt == "collective":
            kw["collective"] = True
        elif opt.startswith("slow="):
            seconds, _, gaps = opt[5:].partition("/")
            kw["slow"] = float(seconds)
            if gaps:
                kw["gaps"] = int(gaps)
        elif opt.startswith("spin="):
            kw["spin"] = float(opt[5:])
        elif opt == "always":
            kw["always"] = True
        elif opt:
            sys.exit(f"app.py: unknown kernel option {opt!r}")
        fakecuda.launch(name, **kw)


def main(args):
    for a in args:
        step(a)
    print("app: no error", flush=True)

"""Run a command and print each line of its output with the seconds since start (diagnostics)."""
import subprocess
import sys
import threading
import time

t0 = time.monotonic()


def pump(stream, tag):
    for line in iter(stream.readline, b""):
        sys.stdout.write(f"{time.monotonic() - t0:7.2f} {tag} {line.decode(errors='replace').rstrip()}\n")
        sys.stdout.flush()


p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
ts = [threading.Thread(target=pump, args=(p.stdout, "o")), threading.Thread(target=pump, args=(p.stderr, "e"))]
for t in ts:
    t.start()
rc = p.wait()
for t in ts:
    t.join()
print(f"{time.monotonic() - t0:7.2f} rc={rc}")
sys.exit(rc)

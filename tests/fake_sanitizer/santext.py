"""compute-sanitizer 2025.3.1's text, line for line as captured on the GPU machine (H200, CUDA 13.0:
tests/data/sanitizer/, devtools/gpu-runs/2026-11-26-h200-sanitizer-capture/): the fake's one source of shapes.

Every line starts with `========= `; a finding's body lines are indented by 4 more spaces, host frames by 8,
and a `========= ` line (the prefix and a space) ends it.
"""

P = "========="
SOURCE = "triage_kernels.cu"  # as given to nvcc
PROGRAM = "triage_kernels"
#: Where each planted bug is in the source (the GPU program's lines differ; only the shapes matter here).
#: (the race stays at 19, where tests/test_triage.py's verdict expects it; the others are the real lines)
LINES = {"oob": 58, "race": 19, "uninit": 74, "flaky": 79, "sync": 60}
END = " "  # the line that ends a finding is the prefix and one space


def signature(name):
    return f"{name}(const float *, float *, int)" if name.startswith("reduce") else f"{name}(float *, int)"


def lines(*body):
    return "".join(f"{P}{line}\n" for line in body)


def backtrace(offset="0x8e93", at="kernel launch time"):
    return [f"     Saved host backtrace up to driver entry point at {at}",
            f"         Host Frame: main [{offset}] in {PROGRAM}"]


def oob(name, thread=0, block=32, line=LINES["oob"]):
    return lines(" Invalid __global__ write of size 4 bytes",
                 f"     at {signature(name)}+0x90 in {SOURCE}:{line}",
                 f"     by thread ({thread},0,0) in block ({block},0,0)",
                 f"     Access to 0x{0x7f07fe801000 + 4 * thread:x} is out of bounds",
                 f"     and is {1 + 4 * thread} bytes after the nearest allocation at 0x7f07fe800000 "
                 "of size 4,096 bytes",
                 *backtrace("0x901d"), END)


def launch_failure(call="cudaDeviceSynchronize"):
    return lines(f' Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API '
                 f"call to {call}.", *backtrace("0x8e81", "error"), END)


def race(name, hazards):
    return lines(f" Error: Race reported between Read access at {signature(name)}+0x1b0 in {SOURCE}:{LINES['race']}",
                 f"     and Write access at {signature(name)}+0x1d0 in {SOURCE}:{LINES['race']} [{hazards} hazards]",
                 END)


def hazard(name, n, kind="RAW"):
    return lines(f" Error: Potential {kind} hazard detected at __shared__ 0x{0x580 + n:x} in block (8,0,0) :",
                 f"     Write Thread (96,0,0) at {signature(name)}+0x1d0 in {SOURCE}:{LINES['race']}",
                 f"     Read Thread (32,0,0) at {signature(name)}+0x1b0 in {SOURCE}:{LINES['race']}",
                 "     Current Value : 0", *backtrace("0x925c"), END)


def uninit(name, thread=0):
    return lines(" Uninitialized __global__ memory read of size 4 bytes",
                 f"     at {signature(name)}+0xc0 in {SOURCE}:{LINES['uninit']}",
                 f"     by thread ({thread},0,0) in block (8,0,0)",
                 f"     Address 0x{0x7f401e002000 + 4 * thread:x}",
                 *backtrace("0x9275"), END)


def barrier(name, thread=63):
    return lines(" Barrier error detected. Divergent thread(s) in block.",
                 f"     at {signature(name)}+0x2c8 in {SOURCE}:{LINES['sync']}",
                 f"     by thread ({thread},0,0) in block (0,0,0)",
                 *backtrace("0x9100"), END)


def error_summary(errors, not_printed=0):
    out = lines(f" ERROR SUMMARY: {errors} error{'' if errors == 1 else 's'}")
    if not_printed:
        out += lines(f" ERROR SUMMARY: {not_printed} error{'' if not_printed == 1 else 's'} were not printed. "
                     "Use --print-limit option to adjust the number of printed errors")
    return out


def race_summary(shown, errors, warnings):
    def n(k, w):
        return f"{k} {w}{'' if k == 1 else 's'}"
    return lines(f" RACECHECK SUMMARY: {n(shown, 'hazard')} displayed ({n(errors, 'error')}, {n(warnings, 'warning')})")

"""compute-sanitizer 2025.3.1's text, line for line as FACTS.md records it (the fake's one source of shapes).

Every line starts with `========= `; a finding's body lines are indented by 4 more spaces, host frames by 8,
and a bare `=========` line ends it.
"""

P = "========="
SOURCE = "/work/tests/gpu/triage_kernels.cu"
PROGRAM = "triage_kernels"
#: Where each planted bug is in the source (the GPU program's lines differ; only the shapes matter here).
LINES = {"oob": 14, "race_write": 19, "race_read": 22, "uninit": 34, "sync": 60}


def signature(name):
    return f"{name}(float *, int)"


def lines(*body):
    return "".join(f"{P}{line}\n" for line in body)


def backtrace(offset="0x8e93", at="kernel launch time"):
    return [f"     Saved host backtrace up to driver entry point at {at}",
            f"         Host Frame: main [{offset}] in {PROGRAM}",
            "         Host Frame: __libc_start_main [0x29d90] in libc.so.6"]


def oob(name, thread=31, block=3):
    return lines(" Invalid __global__ write of size 4 bytes",
                 f"     at {signature(name)}+0x70 in {SOURCE}:{LINES['oob']}",
                 f"     by thread ({thread},0,0) in block ({block},0,0)",
                 "     Access to 0x7f1e2c000400 is out of bounds",
                 "     and is 1 bytes after the nearest allocation at 0x7f1e2c000000 of size 1,024 bytes",
                 *backtrace(), "")


def launch_failure(call="cudaDeviceSynchronize"):
    return lines(f' Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API '
                 f"call to {call}.", *backtrace("0x8f10", "error"), "")


def race(name, hazards):
    return lines(f" Error: Race reported between Write access at {signature(name)}+0x1a0 in {SOURCE}:"
                 f"{LINES['race_write']}",
                 f"     and Read access at {signature(name)}+0x1c0 in {SOURCE}:{LINES['race_read']} "
                 f"[{hazards} hazards]", "")


def hazard(name, block, kind="WAR"):
    return lines(f" Error: Potential {kind} hazard detected at __shared__ 0x700 in block ({block},0,0) :",
                 f"     Read Thread (3,0,0) at {signature(name)}+0x1c0 in {SOURCE}:{LINES['race_read']}",
                 f"     Write Thread (2,0,0) at {signature(name)}+0x1a0 in {SOURCE}:{LINES['race_write']}",
                 "     Current Value : 0, Incoming Value : 0", "")


def uninit(name, thread=0):
    return lines(" Uninitialized __global__ memory read of size 4 bytes",
                 f"     at {signature(name)}+0xd0 in {SOURCE}:{LINES['uninit']}",
                 f"     by thread ({thread},0,0) in block (0,0,0)",
                 "     Address 0x7f1e2c100000",
                 *backtrace("0x9012"), "")


def barrier(name, thread=63):
    return lines(" Barrier error detected. Divergent thread(s) in block.",
                 f"     at {signature(name)}+0x2c8 in {SOURCE}:{LINES['sync']}",
                 f"     by thread ({thread},0,0) in block (0,0,0)",
                 *backtrace("0x9100"), "")


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

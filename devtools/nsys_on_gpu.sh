#!/usr/bin/env bash
# Make a real .nsys-rep on the GPU machine and record what nsys really prints.
#
# Run from the repository root there (no network), with `.debs/` carried:
#   for d in .debs/*.deb; do dpkg -x "$d" /tmp/libdw; done; bash devtools/nsys_on_gpu.sh "$OUT/nsys"
#
# .debs/ holds Debian 12 packages of libdw1 and its dependencies (libelf1,
# libbz2-1.0, liblzma5, zlib1g) and a psutil wheel (abi3). The nsys copy
# inside Nsight Compute traces, but its QdstrmImporter cannot start there for
# want of libdw.so.1, so it leaves a .qdstrm (FACTS.md). This script puts the
# unpacked libdw/libelf on LD_LIBRARY_PATH (the other three only if the system
# lacks them), profiles examples/torch_matmul_softmax.py with
# `python -m nsightwrap nsys`, reads the report back (stats, SQLite export, kernel
# rows) and probes nsys's messages for an existing output file, a missing
# program, a failing program and an unknown report name.
#
# Writes at most 7 files into OUTDIR (the device returns 8 at most):
#   log.txt         everything printed, step by step
#   profile.json    the NsysRun of the profile
#   torch.nsys-rep  the report (or torch.qdstrm when the import failed)
#   stats_raw.txt   nsys stats output per report, raw, plus the probes' raw output
#   kernels.csv     kernel_rows of the SQLite export
#   torch.sqlite    the export, if under 2 MB
# Every step prints what it does; every nsys call runs under `timeout`; the
# whole script keeps within NSYS_GPU_BUDGET_S (default 540 s).
set -u

OUTDIR=${1:?usage: bash devtools/nsys_on_gpu.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
BUDGET=${NSYS_GPU_BUDGET_S:-540}
START=$SECONDS
UNPACK=/tmp/libdw
LIBDIR=$UNPACK/usr/lib/x86_64-linux-gnu
EXTRA_LIBDIR=$UNPACK/lib/x86_64-linux-gnu
RAW=$OUTDIR/stats_raw.txt
WORK=/tmp/nsys_work  # stats and export write next to the report: keep their files out of OUTDIR
# The program to profile (word-split); override only for a dry run with the fake nsys.
read -r -a TARGET <<<"${NSYS_GPU_CMD:-python3 examples/torch_matmul_softmax.py}"

step() { echo; echo "=== [$((SECONDS - START)) s] $*"; }
left() { local l=$((BUDGET - (SECONDS - START))); ((l < 15)) && l=15; echo "$l"; }
# tmo SECONDS CMD...: timeout, capped by what is left of the budget; SIGKILL 5 s after SIGTERM.
tmo() {
    local want=$1 l
    shift
    l=$(left)
    ((want > l)) && want=$l
    timeout -k 5 "$want" "$@"
}
show() { echo "+ $*"; "$@"; local rc=$?; echo "(exit $rc)"; return $rc; }
raw_section() { printf '\n##### %s\n' "$1" >>"$RAW"; }

main() {
    step "machine"
    cat /etc/os-release 2>&1 | head -4
    uname -a
    ldd --version 2>&1 | head -1
    tmo 30 nvidia-smi -L 2>&1
    python3 --version 2>&1
    echo "nsys on PATH: $(command -v nsys || echo none)"
    ls -d /opt/nvidia/*/* /usr/local/cuda/bin/nsys* 2>&1 | head -20
    : >"$RAW"

    step "unpack .debs into $UNPACK"
    ls -la .debs/ 2>&1
    if [ -e "$LIBDIR/libdw.so.1" ]; then
        echo "already unpacked: $(ls "$LIBDIR")"
    elif command -v dpkg >/dev/null; then
        for d in .debs/*.deb; do echo "dpkg -x $d"; dpkg -x "$d" "$UNPACK" || echo "dpkg -x $d failed"; done
    else
        echo "no dpkg: unpacking with Python (ar + tar)"
        tmo 60 python3 - "$UNPACK" .debs/*.deb <<'PY'
import io, sys, tarfile
dest = sys.argv[1]
for deb in sys.argv[2:]:
    with open(deb, "rb") as f:
        assert f.read(8) == b"!<arch>\n", deb
        while True:
            h = f.read(60)
            if len(h) < 60:
                break
            name, size = h[:16].decode().strip().rstrip("/"), int(h[48:58])
            data = f.read(size)
            f.read(size % 2)
            if name.startswith("data.tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as t:
                    try:
                        t.extractall(dest, filter="tar")
                    except TypeError:
                        t.extractall(dest)
                print("unpacked", deb, name)
PY
    fi
    ls -la "$LIBDIR" "$EXTRA_LIBDIR" 2>&1

    step "library path: libdw/libelf first; bz2/lzma/z only where the system lacks them"
    export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local cache
    cache=$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null)
    for lib in libbz2.so.1.0 liblzma.so.5 libz.so.1; do
        if grep -q "$lib " <<<"$cache"; then
            echo "system has $lib"
        else
            echo "system lacks $lib: adding $EXTRA_LIBDIR"
            case ":$LD_LIBRARY_PATH:" in *":$EXTRA_LIBDIR:"*) ;; *) export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$EXTRA_LIBDIR" ;; esac
        fi
    done
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

    step "python modules"
    if ! python3 -c "import psutil" 2>/dev/null; then
        echo "psutil missing: unpacking the carried wheel into /tmp/pydeps"
        tmo 60 python3 -c "import glob, zipfile; zipfile.ZipFile(sorted(glob.glob('.debs/psutil-*.whl'))[-1]).extractall('/tmp/pydeps')"
        export PYTHONPATH="/tmp/pydeps${PYTHONPATH:+:$PYTHONPATH}"
    fi
    tmo 60 python3 -c "
for m in ('psutil', 'pandas', 'numpy', 'torch', 'tenacity', 'yaml'):
    try:
        mod = __import__(m); print(m, getattr(mod, '__version__', '?'))
    except Exception as e:
        print(m, 'MISSING', e)"
    if ! tmo 60 python3 -c "import nsightwrap.cli.main"; then
        echo "the nsightwrap package does not import here (a dependency missing: see above): nothing more to do"
        return 1
    fi
    NSW=(python3 -m nsightwrap nsys)
    echo "nsightwrap's nsys command runs as: ${NSW[*]}"

    step "find nsys"
    NSYS=$(tmo 60 "${NSW[@]}" find 2>&1 | tail -1)
    echo "nsys: $NSYS"
    if [ ! -x "$NSYS" ]; then
        NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -1)
        echo "fallback nsys: ${NSYS:-none}"
    fi
    if [ -z "$NSYS" ] || [ ! -x "$NSYS" ]; then
        echo "no nsys found: nothing more to do"
        return 1
    fi
    show tmo 60 "$NSYS" --version
    show tmo 90 "$NSYS" status -e

    step "QdstrmImporter: what it links against"
    local nsys_dir importer
    nsys_dir=$(dirname "$(readlink -f "$NSYS")")
    importer=""
    for c in "$nsys_dir/../linux-desktop-glibc_2_11_3-x64/QdstrmImporter" \
             /opt/nvidia/nsight-compute/*/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter \
             "$nsys_dir/../host-linux-x64/QdstrmImporter" "$nsys_dir/QdstrmImporter"; do
        if [ -x "$c" ]; then importer=$(readlink -f "$c"); break; fi
    done
    echo "importer: ${importer:-not found}"
    if [ -n "$importer" ]; then
        echo "-- without the unpacked libraries:"
        env -u LD_LIBRARY_PATH ldd "$importer" 2>&1 | grep -i "not found" || echo "(nothing missing)"
        echo "-- with LD_LIBRARY_PATH=$LD_LIBRARY_PATH:"
        ldd "$importer" 2>&1 | grep -i "not found" || echo "(nothing missing)"
        ldd "$importer" 2>&1 | grep -E "libdw|libelf|libbz2|liblzma|libz\." || true
        show tmo 30 "$importer" --version 2>&1 | tail -5
    fi

    step "profile examples/torch_matmul_softmax.py under nsys (through ${NSW[*]})"
    rm -f "$OUTDIR"/torch.nsys-rep "$OUTDIR"/torch.qdstrm "$OUTDIR"/torch.sqlite
    tmo 240 "${NSW[@]}" profile --timeout 200 --nsys "$NSYS" -o "$OUTDIR/torch" \
        -- "${TARGET[@]}" >"$OUTDIR/profile.json"
    echo "(exit $?)"
    cat "$OUTDIR/profile.json"
    local rep
    rep=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('report') or '')" "$OUTDIR/profile.json" 2>/dev/null)
    echo "report: ${rep:-none}"
    ls -la "$OUTDIR"

    if [[ "$rep" == *.qdstrm ]]; then
        step "the import failed: running QdstrmImporter by hand on $rep"
        if [ -n "$importer" ]; then
            ldd "$importer" 2>&1
            show tmo 120 "$importer" -i "$rep" 2>&1 | tail -40
            ls -la "$OUTDIR" /tmp/*.nsys-rep 2>/dev/null
            local made="${rep%.qdstrm}.nsys-rep"
            if [ -s "$made" ]; then
                echo "QdstrmImporter made $made"
                rep=$made
            fi
        else
            echo "no QdstrmImporter to try"
        fi
    fi

    if [[ "$rep" != *.nsys-rep ]] || [ ! -s "$rep" ]; then
        echo "no .nsys-rep: skipping stats and export"
        return 1
    fi

    rm -rf "$WORK" && mkdir -p "$WORK"
    cp "$rep" "$WORK/torch.nsys-rep"
    rep=$WORK/torch.nsys-rep

    step "nsys stats through ${NSW[*]} (one call per report), on a copy in $WORK"
    rm -rf /tmp/nsys_stats
    tmo 300 "${NSW[@]}" stats "$rep" --nsys "$NSYS" --timeout 100 --save-dir /tmp/nsys_stats
    echo "(exit $?)"
    for f in /tmp/nsys_stats/*.txt; do
        [ -e "$f" ] || continue
        raw_section "nsightwrap stats raw output: $(basename "$f")"
        cat "$f" >>"$RAW"
    done

    step "raw nsys stats, several reports in one call, stdout and stderr apart"
    tmo 120 "$NSYS" stats --report cuda_gpu_kern_sum --report nvtx_sum --report cuda_api_sum --format csv \
        --output - "$rep" >/tmp/multi.out 2>/tmp/multi.err
    local rc=$?
    echo "(exit $rc)"
    raw_section "multi-report stats: exit $rc; STDOUT"
    cat /tmp/multi.out >>"$RAW"
    raw_section "multi-report stats: STDERR"
    cat /tmp/multi.err >>"$RAW"
    head -c 3000 /tmp/multi.out
    head -c 2000 /tmp/multi.err

    step "probe: an unknown report name"
    tmo 60 "$NSYS" stats --report no_such_report_xyz --format csv --output - "$rep" >/tmp/unknown.out 2>&1
    rc=$?
    raw_section "unknown report: exit $rc"
    cat /tmp/unknown.out >>"$RAW"
    cat /tmp/unknown.out
    echo "(exit $rc)"
    tmo 60 "$NSYS" stats --help-reports 2>&1 | head -60

    step "export to SQLite and kernel rows"
    local db
    db=$(tmo 150 "${NSW[@]}" export "$rep" --nsys "$NSYS" -o "$WORK/export.sqlite" --timeout 120 | tail -1)
    echo "sqlite: ${db:-none}"
    if [ -n "$db" ] && [ -s "$db" ]; then
        ls -la "$db"
        tmo 60 "${NSW[@]}" kernels "$db" --csv "$OUTDIR/kernels.csv"
        echo "(exit $?)"
        tmo 60 python3 - "$db" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
print("tables:", ", ".join(tables))
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY"):
    if t in tables:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        n = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        print(f"{t}: {n} rows; columns: {', '.join(cols)}")
PY
        if [ "$(stat -c %s "$db")" -lt 2000000 ]; then
            cp "$db" "$OUTDIR/torch.sqlite"
        else
            echo "sqlite is $(stat -c %s "$db") bytes: not copied"
        fi
    fi

    step "probe: nsys profile onto an existing report (a copy), a missing program, a failing program"
    cp "$rep" /tmp/exists_probe.nsys-rep
    local before
    before=$(sha256sum /tmp/exists_probe.nsys-rep | cut -c1-16)
    tmo 90 "$NSYS" profile --trace=cuda -o /tmp/exists_probe.nsys-rep true >/tmp/exists.out 2>&1
    rc=$?
    raw_section "existing output: exit $rc; file changed: $([ "$(sha256sum /tmp/exists_probe.nsys-rep | cut -c1-16)" = "$before" ] && echo no || echo YES)"
    cat /tmp/exists.out >>"$RAW"
    cat /tmp/exists.out
    echo "(exit $rc)"
    tmo 90 "$NSYS" profile --trace=cuda -o /tmp/missing_probe no_such_program_xyz >/tmp/missing.out 2>&1
    rc=$?
    raw_section "missing program: exit $rc; files: $(ls /tmp/missing_probe* 2>/dev/null | tr '\n' ' ')"
    cat /tmp/missing.out >>"$RAW"
    cat /tmp/missing.out
    echo "(exit $rc)"
    tmo 90 "$NSYS" profile --trace=cuda -o /tmp/rc_probe python3 -c "print('failing on purpose'); raise SystemExit(3)" >/tmp/rc.out 2>&1
    rc=$?
    raw_section "program exits 3: exit $rc; files: $(ls /tmp/rc_probe* 2>/dev/null | tr '\n' ' ')"
    cat /tmp/rc.out >>"$RAW"
    cat /tmp/rc.out
    echo "(exit $rc)"
    rm -f /tmp/exists_probe* /tmp/missing_probe* /tmp/rc_probe*
    return 0
}

main "$@" 2>&1 | tee "$OUTDIR/log.txt"
rc=${PIPESTATUS[0]}
echo
echo "=== done in $((SECONDS - START)) s (exit $rc); files in $OUTDIR:" | tee -a "$OUTDIR/log.txt"
ls -la "$OUTDIR" | tee -a "$OUTDIR/log.txt"
exit "$rc"

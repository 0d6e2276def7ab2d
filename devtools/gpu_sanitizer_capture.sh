#!/usr/bin/env bash
# Issue 21: compute-sanitizer's real output on kernels with planted bugs (tests/gpu/triage_kernels.cu), for the
# fake compute-sanitizer and the parser: each mode plain, the flaky one 12 times, each tool on each mode it
# concerns (text, and memcheck's --xml once), what SIGINT/SIGTERM to a stalled sanitizer run prints.
#   bash devtools/gpu_sanitizer_capture.sh OUTDIR [SOURCE.cu]
set -u
OUT=${1:?outdir}; SRC=${2:-tests/gpu/triage_kernels.cu}; mkdir -p "$OUT/raw"; exec > >(tee -a "$OUT/capture.log") 2>&1
CS=/usr/local/cuda/bin/compute-sanitizer; W=$(mktemp -d /tmp/nw-san.XXXXXX); B=$W/triage_kernels
after() { echo "   left: $(pgrep -f 'triage_kernels|compute-sanitizer' | tr '\n' ' ') gpu: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"; }
t() {  # t NAME LIMIT CMD...: output in raw/NAME.txt, with rc and seconds
  local name=$1 lim=$2; shift 2; local t0; t0=$(date +%s.%N)
  timeout -k 3 "$lim" "$@" > "$OUT/raw/$name.txt" 2>&1; local rc=$?
  echo "== $name: rc=$rc in $(python3 -c "import time; print(f'{time.time() - $t0:.2f}')") s ($*)"; tail -3 "$OUT/raw/$name.txt" | cut -c1-200
  ps -eo pid,ppid,stat,etimes,cmd | grep -E "[t]riage_kernels|[c]ompute-sanitizer|[T]reeLauncher" | sed 's/^/   still: /' | cut -c1-200
  pkill -9 -f "$B" 2>/dev/null; sleep 0.5; after
}
$CS --version | tail -2; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( cd "$W" && nvcc -O2 -arch=sm_90 -lineinfo -o "$B" "$OLDPWD/$SRC" ) || { echo "nvcc failed"; exit 1; }
cp "$OLDPWD/$SRC" "$W/" 2>/dev/null
for m in clean oob race uninit; do t "plain-$m" 30 "$B" $m; done
for i in $(seq 1 12); do t "plain-flaky-$i" 30 "$B" flaky; done
t plain-selfhang 20 "$B" selfhang 8
t plain-ncuhang 20 "$B" ncuhang 5
for m in clean oob; do t "memcheck-$m" 120 $CS --tool memcheck "$B" $m; done
t memcheck-oob-xml 120 $CS --tool memcheck --xml --save "$OUT/raw/memcheck-oob.xml" "$B" oob
t memcheck-flaky-bad 120 $CS --tool memcheck "$B" flaky 1.0
t memcheck-flaky-bad-leh 120 $CS --tool memcheck --error-exitcode 7 "$B" flaky 1.0
t racecheck-race 120 $CS --tool racecheck "$B" race
t racecheck-race-hazard 120 $CS --tool racecheck --racecheck-report hazard --print-limit 5 "$B" race
t synccheck-race 120 $CS --tool synccheck "$B" race
t initcheck-uninit 120 $CS --tool initcheck "$B" uninit
t initcheck-clean 120 $CS --tool initcheck "$B" clean
t memcheck-kfilter 120 $CS --tool memcheck --kernel-name kns=oob_write "$B" oob
t memcheck-kfilter-other 120 $CS --tool memcheck --kernel-name kns=vec_add "$B" oob
# a stalled sanitizer run: what SIGINT prints (timeout -s INT), then SIGTERM
t memcheck-selfhang-int 15 timeout -s INT 10 $CS --tool memcheck "$B" selfhang 60
t memcheck-selfhang-term 15 timeout -s TERM 10 $CS --tool memcheck "$B" selfhang 60
t racecheck-ncuhang 60 $CS --tool racecheck "$B" ncuhang 20
rm -rf "$W"; after
( cd "$OUT" && tar czf raw.tgz raw && rm -rf raw )

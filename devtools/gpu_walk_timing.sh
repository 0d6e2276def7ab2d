#!/usr/bin/env bash
# Where a first ladder walk's time goes (issue 10): the walk on `app mixed` with every line
# time-stamped, its attempts' timings, and nsys's calibration cost in its variants.
#   carry: [".whl", ".debs"]   command: bash devtools/gpu_walk_timing.sh "$OUT"
set -u
OUT=${1:?outdir}
mkdir -p /tmp/libdw /tmp/nw "$OUT"
for d in .debs/*.deb; do dpkg -x "$d" /tmp/libdw 2>/dev/null; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
NCU=/usr/local/cuda/bin/ncu
APP=/tmp/nw/app
nvidia-smi -L
nvcc -O2 -arch=sm_90 -lineinfo -o $APP tests/gpu/kernels.cu || exit 1
check() { echo "[$1] GPU: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"; ps -eo pid,cmd | grep -E "[n]cu |[a]pp mixed|[n]sys" ; }
T() { local lim=$1; shift; echo "### $*"; timeout --kill-after=10 "$lim" python3 devtools/stamp.py "$@"; }
for i in 1 2 3; do /usr/bin/time -f "plain app mixed: %e s" $APP mixed 60 >/dev/null; done
/usr/bin/time -f "plain app ok: %e s" $APP ok >/dev/null
check plain
for v in "a" "b" "c"; do
  rm -rf /tmp/ns; mkdir -p /tmp/ns
  case $v in
    a) extra="";;
    b) extra="--cpuctxsw=none --backtrace=none";;
    c) extra="--cpuctxsw=none --backtrace=none --export=sqlite";;
  esac
  s=$(date +%s.%N)
  timeout 60 $NSYS profile --trace=cuda --sample=none $extra -o /tmp/ns/c $APP mixed 60 > /tmp/ns/log 2>&1; rc=$?
  m=$(date +%s.%N)
  [ -f /tmp/ns/c.sqlite ] || timeout 60 $NSYS export --type sqlite --force-overwrite=true -o /tmp/ns/c.sqlite /tmp/ns/c.nsys-rep >> /tmp/ns/log 2>&1
  e=$(date +%s.%N)
  echo "nsys variant $v ($extra): profile rc=$rc $(python3 -c "print(round($m-$s,2))") s, export $(python3 -c "print(round($e-$m,2))") s"
done
tail -5 /tmp/ns/log
python3 - <<'PY'
import sqlite3
c = sqlite3.connect("/tmp/ns/c.sqlite")
print("tables:", [r[0] for r in c.execute("select name from sqlite_master where type='table'")][:60])
try:
    print("runtime api names:", sorted({r[0] for r in c.execute("select s.value from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on r.nameId=s.id")}))
except Exception as e:
    print("runtime:", e)
PY
rm -rf /tmp/nsr; mkdir -p /tmp/nsr
timeout 60 $NSYS profile --trace=cuda --sample=none --cpuctxsw=none --export=sqlite -o /tmp/nsr/r $APP range > /dev/null 2>&1
python3 - <<'PY'
import sqlite3
c = sqlite3.connect("/tmp/nsr/r.sqlite")
print("range program runtime api names:", sorted({r[0] for r in c.execute("select s.value from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on r.nameId=s.id")}))
PY
check nsys
T 60 $NCU --metrics gpu__time_duration.sum -k wait_for_host $APP mixed 8
check ncu-hang-8s
rm -f /tmp/w.db
T 120 python3 -m nsightwrap run --json --store /tmp/w.db --ncu $NCU --nsys $NSYS --profile default --set basic -- $APP mixed 60 > /tmp/walk1.txt
cat /tmp/walk1.txt | cut -c1-400 | grep -v '^ *[0-9.]* o ' 
python3 - <<'PY'
import json
lines = [l.split(" o ", 1)[1] for l in open("/tmp/walk1.txt") if " o " in l]
doc = json.loads("\n".join(lines))
for step in doc.get("steps", []):
    a = step.get("attempt")
    if a is None:
        print(step["job"], step["rung"], "skipped", step["skipped"]); continue
    st = a.get("stall") or {}
    print(a["started_at"], a["status"], "elapsed", a["elapsed_s"], "detect", a.get("detection_s"),
          "silent", st.get("silent_s"), "allow", st.get("allowance_s"), "stop", (a.get("stop") or {}).get("duration_s"),
          "kernels", len(a["kernels"]), step["job"], step["rung"], a.get("notes"))
PY
check walk1
T 60 python3 -m nsightwrap run --json --store /tmp/w.db --ncu $NCU --nsys $NSYS --profile default --set basic -- $APP mixed 60 | grep -v ' o '
check walk2

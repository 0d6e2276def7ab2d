#!/usr/bin/env bash
# Issue 19, torchrun goals: would one ncu per rank (instead of one ncu over the whole torchrun job) cut a
# walk's time? Raw ncu, no nsightwrap, on the 2-GPU machine, tests/gpu/multi_allreduce.py (2 ranks):
#   alone      the job without ncu
#   single     one ncu over torchrun, collectives left out, --set basic (today's first attempt)
#   perrank    one ncu per rank (torchrun --no-python + a rank wrapper), collectives left out, --set basic
#   split      one attempt instead of two: rank 0 profiles only the collectives (LaunchStats, one pass),
#              rank 1 every other kernel with --set basic
#   onerank    today's second attempt: rank 0 profiles the collectives (LaunchStats), rank 1 runs plain
#   perrankall one ncu per rank, NOTHING left out, --set basic: does the collective pass when each rank has its
#              own ncu (each replays its own collective), or hang as under one ncu over the job? (limit 60 s)
#   perrankls  one ncu per rank, nothing left out, --section LaunchStats (one pass) (limit 60 s)
#   concsingle single and onerank at the same time on the same two GPUs (onerank on another rendezvous port):
#              can a walk's collectives job overlap its main attempt? (each half's time and kernel count)
#   concperrank perrank and onerank at the same time, likewise
# STEPS="alone perrankall" picks steps (default: all).
# Each step under timeout; after each: leftover processes and nvidia-smi's compute apps.
#   bash devtools/gpu_perrank.sh OUTDIR
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${1:?outdir}; mkdir -p "$OUT"; exec > >(tee -a "$OUT/gpu_perrank.log") 2>&1
PY=${PY:-/opt/torch/.venv/bin/python}; TORCHRUN=$(dirname "$PY")/torchrun; NCU=${NCU:-/usr/local/cuda/bin/ncu}
PROG=$PWD/tests/gpu/multi_allreduce.py; W=$(mktemp -d /tmp/nw-perrank.XXXXXX)
NONCCL='regex:^(?!nccl).*'
cat > "$W/wrap.sh" <<WRAP
#!/usr/bin/env bash
# wrap.sh MODE0 MODE1: rank r runs under the ncu options of MODE_r (plain = no ncu)
r=\${LOCAL_RANK:?}; mode=\$1; [ "\$r" = 1 ] && mode=\$2
case \$mode in
  plain) exec "$PY" -u "$PROG" ;;
  basic) exec "$NCU" --set basic -k '$NONCCL' -f -o "$W/\$3.r\$r" --log-file "$W/\$3.r\$r.log" "$PY" -u "$PROG" ;;
  all)   exec "$NCU" --set basic -f -o "$W/\$3.r\$r" --log-file "$W/\$3.r\$r.log" "$PY" -u "$PROG" ;;
  ls)    exec "$NCU" --section LaunchStats -f -o "$W/\$3.r\$r" --log-file "$W/\$3.r\$r.log" "$PY" -u "$PROG" ;;
  coll)  exec "$NCU" --section LaunchStats -k 'regex:^nccl' -f -o "$W/\$3.r\$r" --log-file "$W/\$3.r\$r.log" "$PY" -u "$PROG" ;;
esac
WRAP
chmod +x "$W/wrap.sh"
after() {
  echo "== after $1: left: $(pgrep -f 'multi_allreduce|ncu|TreeLauncher' | grep -v $$ | tr '\n' ' ')"
  echo "== nvidia-smi: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')"
}
step() {  # step NAME CMD...   (LIMIT=seconds, default 100)
  local name=$1; shift; local t0; t0=$(date +%s.%N)
  case " ${STEPS:-$name} " in *" $name "*) ;; *) return ;; esac
  timeout -k 5 "${LIMIT:-100}" "$@" > "$W/$name.out" 2>&1; local rc=$?
  local dt; dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  echo "== $name: rc=$rc in $dt s; profiled: $(cat "$W/$name".r*.log "$W/$name.out" 2>/dev/null | grep -c '==PROF== Profiling')"
  grep -h -E '==ERROR==|==WARNING==|multi_allreduce:' "$W/$name.out" "$W/$name".r*.log 2>/dev/null | sort | uniq -c | head -5
  pkill -9 -f "$PROG" 2>/dev/null; pkill -9 -f "$W/" 2>/dev/null; sleep 2; after "$name"
}
both() {  # both NAME -- CMD1... -- CMD2...: two runs at once, each timed (LIMIT applies to each)
  local name=$1; shift 2; local a=() b=(); while [ "$1" != -- ]; do a+=("$1"); shift; done; shift; b=("$@")
  case " ${STEPS:-$name} " in *" $name "*) ;; *) return ;; esac
  local t0; t0=$(date +%s.%N)
  ( s=$(date +%s.%N); timeout -k 5 "${LIMIT:-100}" "${a[@]}" > "$W/$name.a.out" 2>&1; echo "rc=$? $(python3 -c "import time; print(f'{time.time() - $s:.1f}')") s" > "$W/$name.a.rc" ) & local pa=$!
  ( s=$(date +%s.%N); timeout -k 5 "${LIMIT:-100}" "${b[@]}" > "$W/$name.b.out" 2>&1; echo "rc=$? $(python3 -c "import time; print(f'{time.time() - $s:.1f}')") s" > "$W/$name.b.rc" ) & local pb=$!
  wait "$pa" "$pb"  # not a bare wait: it would wait for the tee of the log too
  local dt; dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  echo "== $name: both done in $dt s; first: $(cat "$W/$name.a.rc"), profiled $(cat "$W/$name.a.out" "$W"/"$name"a.r*.log 2>/dev/null | grep -c '==PROF== Profiling'); second: $(cat "$W/$name.b.rc"), profiled $(cat "$W/$name.b.out" "$W"/"$name"b.r*.log 2>/dev/null | grep -c '==PROF== Profiling')"
  grep -h -E '==ERROR==|==WARNING==|multi_allreduce:|Error|error' "$W/$name".*.out "$W/$name"*.r*.log 2>/dev/null | sort | uniq -c | head -8
  pkill -9 -f "$PROG" 2>/dev/null; pkill -9 -f "$W/" 2>/dev/null; sleep 2; after "$name"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step alone   "$TORCHRUN" --nproc-per-node 2 "$PROG"
step single  "$NCU" --set basic -k "$NONCCL" --target-processes all -f -o "$W/single" "$TORCHRUN" --nproc-per-node 2 "$PROG"
step perrank "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" basic basic perrank
step split   "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" coll basic split
step onerank "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" coll plain onerank
LIMIT=60 step perrankall "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" all all perrankall
LIMIT=60 step perrankls  "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" ls ls perrankls
both concsingle -- "$NCU" --set basic -k "$NONCCL" --target-processes all -f -o "$W/concsinglea" "$TORCHRUN" --nproc-per-node 2 "$PROG" \
  -- "$TORCHRUN" --nproc-per-node 2 --master-port 29611 --no-python "$W/wrap.sh" coll plain concsingleb
both concperrank -- "$TORCHRUN" --nproc-per-node 2 --no-python "$W/wrap.sh" basic basic concperranka \
  -- "$TORCHRUN" --nproc-per-node 2 --master-port 29611 --no-python "$W/wrap.sh" coll plain concperrankb
step alone2  "$TORCHRUN" --nproc-per-node 2 "$PROG"
ls -la "$W" | grep ncu-rep
rm -rf "$W"

#!/usr/bin/env bash
# A real single-node Slurm for the Slurm tests (make test-slurm): the tests marked `slurm` against
# Debian's slurm-wlm and munge, started here and stopped here.
#
#   bash devtools/slurm_single_node.sh [PYTEST ARGS...]      (default: tests/fallback/test_slurm_real.py)
#
# Installs slurm-wlm and munge with apt-get when they are missing and this is root (else says what to
# install). Everything else lives in a temporary folder: a munge key and munged on a socket of its own,
# a slurm.conf for this one node (two "gpu" GRES backed by /dev/null and /dev/zero, so `--gpus-per-node=1`
# is accepted; no GPU is needed: the tests use the fake ncu), slurmctld and slurmd on ports of their own. On exit (also on
# Ctrl-C or a failure) every daemon it started is stopped and the folder removed.
# Accounting is off (no slurmdbd), so `sacct` cannot tell a failed job: the tests here cover submission,
# job arrays, results into the store, and cancelling; failed-job handling is covered by tests/fake_slurm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge
  else
    echo "slurm_single_node: install Debian's slurm-wlm and munge first (sudo apt-get install slurm-wlm munge)" >&2
    exit 2
  fi
fi

T=$(mktemp -d /tmp/nsightwrap-slurm.XXXXXX)
chmod 700 "$T"
PIDS=()
stop() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  [ -n "${KEEP_SLURM_TMP:-}" ] || rm -rf "$T"
  exit $rc
}
trap stop EXIT INT TERM

HOST=$(hostname -s)
USER_NAME=$(id -un)
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/log"
chmod 700 "$T/munge"
head -c 1024 /dev/urandom > "$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
munged --foreground --force --key-file="$T/munge/munge.key" --socket="$T/munge/munge.socket" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/log/munged.log" --seed-file="$T/munge/seed" &
PIDS+=($!)

port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(port)
SLURMD_PORT=$(port)
cat > "$T/slurm.conf" <<CONF
ClusterName=nsightwrap-test
SlurmctldHost=$HOST
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.socket
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
GresTypes=gpu
NodeName=$HOST CPUs=$(nproc) RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$T/gres.conf" <<CONF
AutoDetect=off
NodeName=$HOST Name=gpu File=/dev/null
NodeName=$HOST Name=gpu File=/dev/zero
CONF
export SLURM_CONF="$T/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" > "$T/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" > "$T/log/slurmd.out" 2>&1 &
PIDS+=($!)

ready=0
for _ in $(seq 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)'; then ready=1; break; fi
  sleep 0.2
done
if [ $ready != 1 ]; then
  echo "slurm_single_node: the node did not come up; the logs:" >&2
  tail -n 20 "$T"/log/* >&2
  exit 1
fi
echo "slurm_single_node: $HOST up (SLURM_CONF=$SLURM_CONF)"

cd "$ROOT"
set +e
NSIGHTWRAP_SLURM_TEST=1 NSIGHTWRAP_SLURM_SHARED="$T/jobs" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
  "$PY" -m pytest -q -p no:cacheprovider -m slurm "${@:-tests/fallback/test_slurm_real.py}"
rc=$?
set -e
[ $rc = 0 ] || tail -n 20 "$T"/log/* >&2
exit $rc

#!/usr/bin/env bash
# The CPU suite (every test but the gpu-marked ones) on the GPU machine, as session 16 ran it (FACTS.md, "Session 16").
#
#   carry: [".whl"]   wheels for the machine's python3 (3.12): the test extras and what nsightwrap imports that
#                      /opt/torch/.venv lacks (tenacity, SQLAlchemy, psycopg + psycopg-binary, submitit, cloudpickle,
#                      hypothesis, sortedcontainers, attrs, pytest, pluggy, iniconfig, packaging, pytest-xdist,
#                      execnet, rich, markdown-it-py, mdurl, Pygments, PyYAML, psutil, pandas, python-dateutil, six,
#                      typing_extensions) and the ncu-report wheel (without it reports are read through
#                      `ncu --import`, which the fake ncu does not do); download them here with
#                      `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#                      --platform manylinux_2_17_x86_64 ... -d .whl NAME==VERSION` (the device README's recipe)
#   command: bash devtools/gpu_cpu_suite.sh "$OUT" [WORKERS]
#
# The venv is made by devtools/make_venv.sh, so that the children see /opt/torch/.venv's numpy and torch (a venv
# made with --system-site-packages sees /usr's site there); wheels on PYTHONPATH do not reach the children that
# the tests give a PYTHONPATH of their own. Writes $OUT/cpu-suite.txt; lists what is left running and on the GPU.
set -u
OUT=${1:?outdir}
WORKERS=${2:-12}
mkdir -p "$OUT"
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl PYTHONUNBUFFERED=1
unset PYTHONPATH
(sh devtools/make_venv.sh python3 /tmp/nsightwrap-cpu-venv \
    && /tmp/nsightwrap-cpu-venv/bin/python -m pip install -q --no-deps --no-compile .whl/*.whl \
    && PIP_CONFIG_SETTINGS=editable_mode=compat /tmp/nsightwrap-cpu-venv/bin/python -m pip install -q --no-deps \
        --no-build-isolation -e .) > "$OUT/install.txt" 2>&1 || { echo "install failed: $OUT/install.txt"; exit 1; }
timeout 300 /tmp/nsightwrap-cpu-venv/bin/python -m pytest -q -n "$WORKERS" --dist worksteal -p no:cacheprovider \
    -m "not gpu" -rfs > "$OUT/cpu-suite.txt" 2>&1
echo "suite rc=$?: $(tail -1 "$OUT/cpu-suite.txt")"
grep -E "^(FAILED|ERROR)" "$OUT/cpu-suite.txt" | cut -c1-200
echo "--- left running"
ps -eo pid,ppid,stat,etime,cmd | grep -E "ncu|nsightwrap|python|sanitizer|zygote|postgres" | grep -v -E "grep|ps -eo"
echo "--- compute apps"
nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader

#!/usr/bin/env bash
# Measure the suite's test durations on this machine and keep them in tests/durations.txt, the order xdist's
# workers run the tests in (tests/order.py: the longest first, in blocks of equal length). Run it on the 2-core
# machine after tests were added or made faster; a stale file only makes `make test` slower.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
NSIGHTWRAP_TEST_STRICT=1 "$PY" -m pytest -q -n 6 --dist worksteal --durations=0 --durations-min=0.05 >"$out" 2>&1 \
    || { tail -20 "$out"; echo "suite_durations: the suite failed; durations not written" >&2; exit 1; }
"$PY" tests/order.py <"$out" >tests/durations.txt
echo "tests/durations.txt: $(wc -l <tests/durations.txt) tests of 0.05 s or more; $(grep -E 'passed|failed' "$out" | tail -1)"

#!/usr/bin/env bash
# The suite's time for two revisions, side by side: each in a fresh clone with its own venv (made as `make
# install-test` makes it), the test command of `make test` run alternately, ROUNDS times each, which revision goes
# first changing every round. The 2-core machine's speed moves by a third within an hour (issue 20), so only runs
# alternated in one sitting compare; a fixed Python loop is timed before each round to show how fast the machine was.
#
#   bash devtools/suite_ab.sh OLD_REV NEW_REV [ROUNDS]        (default 3 rounds; PYTEST_ARGS adds pytest arguments)
#
# Prints one line a run: revision, pytest's summary line, wall, user and system CPU of the whole run. Removes its
# clones at the end.
set -euo pipefail
OLD=${1:?old revision}
NEW=${2:?new revision}
ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nsightwrap-suite-ab-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
for rev in "$OLD" "$NEW"; do
    git clone -q "$HERE" "$WORK/$rev"
    git -C "$WORK/$rev" checkout -q "$rev"
    make -s -C "$WORK/$rev" install-test > "$WORK/$rev.install.log" 2>&1 || { cat "$WORK/$rev.install.log"; exit 1; }
done
loop() {
    /usr/bin/time -f "%e" python3 -c 's = 0
for i in range(20_000_000): s += i' 2>&1
}
for round in $(seq "$ROUNDS"); do
    order=("$OLD" "$NEW")
    [ $((round % 2)) -eq 0 ] && order=("$NEW" "$OLD")
    echo "round $round: fixed loop $(loop) s"
    for rev in "${order[@]}"; do
        cd "$WORK/$rev"
        # shellcheck disable=SC2086
        line=$( { /usr/bin/time -f "wall %e s, user %U s, system %S s" .venv/bin/python -m pytest -q -n 6 \
            --dist worksteal -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 || true; } | tail -2 | tr '\n' ' ')
        echo "  $rev: $line"
    done
done

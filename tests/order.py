"""The order xdist's workers run the tests in: the longest first, in blocks of equal length (issue 20).

`make test` runs the suite with `-n 6 --dist worksteal`. worksteal hands each worker one contiguous block of the
collected tests (the same number of tests each), and a worker that ran out steals the back half of the longest
queue. In the order of collection a block held the slow tests of a few folders (walks, stops, calibrations), and
the run ended with one worker still in a 4 s test while the others had nothing left. Here each worker's block gets
an equal share of the known durations, its longest tests first: what is stolen and what runs last are short tests.

The durations are the suite's own, measured on the 2-core machine and kept in tests/durations.txt (a test not
named there counts as DEFAULT_S). They only order the tests: a stale file makes the run slower, never different.
Written again by `python tests/order.py < pytest-output > tests/durations.txt` from a run with
`--durations=0 --durations-min=0.05` (devtools/suite_durations.sh). NSIGHTWRAP_TEST_ORDER=collection keeps
pytest's order (to compare, or to bisect an order-dependent failure).
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence, TypeVar

DURATIONS = Path(__file__).with_name("durations.txt")
#: What a test not in DURATIONS is taken to last: most of the suite's tests take a few milliseconds.
DEFAULT_S = 0.02
ORDER_VAR = "NSIGHTWRAP_TEST_ORDER"

T = TypeVar("T")


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """nodeid -> seconds, from lines `seconds<TAB>nodeid` (none where the file is missing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        seconds, _, nodeid = line.partition("\t")
        if nodeid:
            found[nodeid] = float(seconds)
    return found


def block_sizes(count: int, workers: int) -> list[int]:
    """How many tests worksteal's first hand-out gives each worker (xdist's WorkStealingScheduling)."""
    sizes, left = [], count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def longest_first(items: Sequence[T], ids: Sequence[str], workers: int, seconds: Mapping[str, float]) -> list[T]:
    """`items` (named by `ids`) in `workers` blocks of worksteal's sizes, each block as long as the others within a
    test, the longest tests at the front of each. Deterministic: every worker computes the same order."""
    sizes = block_sizes(len(items), workers)
    took = [seconds.get(i, DEFAULT_S) for i in ids]
    blocks: list[list[int]] = [[] for _ in sizes]
    totals = [0.0] * len(sizes)
    for index in sorted(range(len(items)), key=lambda i: -took[i]):  # stable: ties keep pytest's order
        block = min((b for b in range(len(sizes)) if len(blocks[b]) < sizes[b]), key=lambda b: totals[b])
        blocks[block].append(index)
        totals[block] += took[index]
    return [items[i] for block in blocks for i in block]


def reorder(config, items: list) -> None:
    """In an xdist worker (and unless NSIGHTWRAP_TEST_ORDER=collection), `items` in longest_first's order."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or workers < 2 or os.environ.get(ORDER_VAR) == "collection":
        return
    items[:] = longest_first(items, [i.nodeid for i in items], workers, read_durations())


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S.*)$")


def durations_from_report(text: str) -> dict[str, float]:
    """nodeid -> seconds (setup, call and teardown together) from pytest's `--durations` lines."""
    total: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _DURATION.match(line.strip())
        if m:
            total[m[2]] += float(m[1])
    return dict(total)


if __name__ == "__main__":
    found = durations_from_report(sys.stdin.read())
    if not found:
        sys.exit("no --durations lines in the input: run pytest with --durations=0 --durations-min=0.05")
    for nodeid, seconds in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{seconds:.2f}\t{nodeid}")

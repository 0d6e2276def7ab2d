#!/usr/bin/env python3
"""Cost of the ncu output parser on pathological output (issue 11, item 6).

    python benchmarks/parser_cost.py            # goal: 10 MB of progress dots in <= 1 s

Cases, each fed in 64 KiB chunks as the watch loop reads them:
- 10 MB of progress dots in one kernel's line (ncu prints about ten; a
  broken or hostile stream may print millions);
- 10 MB of ncu markers glued to program text without newlines;
- 10 MB of program lines (the merged-stdout fallback parses them).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nsightwrap.ncu.output import OutputParser  # noqa: E402

MB = 1 << 20
GOAL_S = 1.0


def timed(text: str, chunk: int = 64 * 1024) -> tuple[float, int]:
    parser = OutputParser()
    t0 = time.perf_counter()
    n = 0
    for i in range(0, len(text), chunk):
        n += len(parser.feed(text[i : i + chunk]))
    n += len(parser.close())
    return time.perf_counter() - t0, n


def main() -> int:
    cases = {
        "10 MB of progress dots": '==PROF== Profiling "k" - 0: 0%' + "." * (10 * MB) + "100% - 10 passes\n",
        "10 MB of glued ncu markers": ("x==WARNING== w" * (10 * MB // 14)),
        "10 MB of program lines": "step 8 loss 0.5\n" * (10 * MB // 16),
    }
    print(f"{'case':32} {'seconds':>8} {'events':>9}")
    ok = True
    for name, text in cases.items():
        best = min(timed(text) for _ in range(3))
        print(f"{name:32} {best[0]:8.3f} {best[1]:9d}")
        if name.endswith("dots"):
            ok = best[0] <= GOAL_S
    print(f"goal: 10 MB of dots in <= {GOAL_S:g} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

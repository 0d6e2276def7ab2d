"""The stdout parser (the fallback for an ncu without --log-file) with the program's
output cut into ncu's, on the real transcripts.

ncu writes its output in small pieces (a header, each mark, whole lines:
tests/fake_ncu/ncutext.py), and a program's writes can fall between any two
of them (FACTS.md, "Program output and ncu's own output"). Whatever the
program prints there, every kernel whose `100% - N passes` (or
application-replay pass) arrives is counted.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsightwrap.ncu.events import KernelDone, ReplayPass
from nsightwrap.ncu.output import OutputParser, parse_all

HERE = Path(__file__).parents[1]
sys.path.insert(0, str(HERE / "fake_ncu"))
from ncutext import atoms  # noqa: E402

DATA = HERE / "data"
TRANSCRIPTS = sorted(str(p.relative_to(DATA)) for d in ("transcripts", "gpu-transcripts")
                     for p in (DATA / d).glob("*.jsonl"))


def text(name: str) -> str:
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    return "".join(r.get("out", "") for r in rows)


def boundaries(whole: str) -> list[int]:
    """Where a program's write can fall: between two of ncu's pieces."""
    return sorted({0, len(whole)} | {e for _, _, e in atoms(whole)})


def distinct_boundaries(whole: str) -> list[int]:
    """The boundaries, one of each kind: the first of those with the same text around them (the line before and
    the line it falls in, numbers aside). An application-replay transcript repeats its pass's lines with other
    numbers: its 135 points are 33 kinds, and the parser takes the same path at each point of a kind (issue 20:
    the exhaustive test cost 2.3 s of CPU on that transcript)."""
    first: dict[tuple[str, str], int] = {}
    for at in boundaries(whole):
        start = whole.rfind("\n", 0, max(whole.rfind("\n", 0, at), 0)) + 1
        end = whole.find("\n", at)
        end = len(whole) if end < 0 else end + 1
        first.setdefault((re.sub(r"\d+", "N", whole[start:at]), re.sub(r"\d+", "N", whole[at:end])), at)
    return sorted(first.values())


def counted(events) -> tuple[list, list]:
    return ([e for e in events if isinstance(e, KernelDone)],
            sorted({(e.name, e.kernel_id, e.pass_number) for e in events if isinstance(e, ReplayPass)}))


def inject(whole: str, insertions: list[tuple[int, str]]) -> str:
    out, last = [], 0
    for at, program in sorted(insertions, key=lambda x: x[0]):
        out += [whole[last:at], program]
        last = at
    return "".join(out) + whole[last:]


def parse_in_chunks(s: str, size: int) -> list:
    parser = OutputParser()
    return [e for i in range(0, len(s), size) for e in parser.feed(s[i:i + size])] + parser.close()


#: What programs print while their kernels are profiled: log lines, tqdm bars
#: (`\r` and no newline), print(end=""), numbers with dots and percents.
PROGRAM_LINES = ["step 8 loss 0.5\n", "\r 40%|####      | 4/10 [00:01<00:02]", "loading", "0.5", "12\n",
                 "epoch 3: acc 99.1%\n", "...", "x = 1 == 1\n", "\n", " - done\n", "50", "\r"]
PROGRAM_TEXT = st.text(st.sampled_from("abcXYZ 0159.,:;%|#-_=/()\t\r\n"), min_size=1, max_size=40).filter(
    lambda t: "pass" not in t and not any(m in t for m in ("==PROF== ", "==WARNING==", "==ERROR==")))


def test_transcripts_hold_kernels():
    three = [n for n in TRANSCRIPTS if len(counted(parse_all(text(n)))[0]) == 3]
    assert "transcripts/hang-after-three-kernels-sigint.jsonl" in three
    assert "gpu-transcripts/hang-inner-SIGINT.jsonl" in three


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_a_program_line_at_every_point_loses_no_kernel(name):
    """One program write at each kind of point where one can fall: the same kernels, every time."""
    whole = text(name)
    clean = counted(parse_all(whole))
    for at in distinct_boundaries(whole):
        for program in PROGRAM_LINES:
            assert counted(parse_all(inject(whole, [(at, program)]))) == clean, (at, program)


@settings(max_examples=100, deadline=None)  # 300 repeated the paths: each kind of point is tested above too
@given(data=st.data(), name=st.sampled_from(TRANSCRIPTS))
def test_program_text_anywhere_between_ncu_pieces(data, name):
    """Several writes of any text at random points, the stream read in chunks of any size."""
    whole = text(name)
    points = boundaries(whole)
    insertions = data.draw(st.lists(st.tuples(st.sampled_from(points), PROGRAM_TEXT), min_size=1, max_size=6))
    mixed = inject(whole, insertions)
    size = data.draw(st.integers(1, 64))
    assert counted(parse_in_chunks(mixed, size)) == counted(parse_all(whole))


def test_the_interleaving_measured_on_the_gpu_machine():
    """FACTS.md: a program printing every 150 ms while its kernel was profiled (H100, ncu 2025.3.1)."""
    seen = ('==PROF== Profiling "spin_ms(long long)" - 0: step 8 loss 0.5\nstep 9 loss 0.5\n0%..step 10 loss 0.5\n'
            "...\n.step 14 loss 0.5\n...50%step 20 loss 0.5\n...\n.100% - 10 passes\n")
    assert counted(parse_all(seen))[0] == [KernelDone("spin_ms(long long)", 0, 10)]

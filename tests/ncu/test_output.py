"""Tests of nsightwrap.ncu.output: real ncu transcripts, chunking invariance, edge cases.

The transcripts are copies of /work/shared/nsight-reference/transcripts, kept
under tests/data so that the tests do not depend on the shared folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nsightwrap.ncu.output as output_module
from nsightwrap.ncu.events import (
    SLOW_LAUNCH_WARNING,
    Connected,
    Disconnected,
    KernelDone,
    KernelStarted,
    NcuError,
    NcuWarning,
    Output,
    ProfNote,
    Progress,
    ReplayPass,
    ReportCreation,
    ReportWritten,
)
from nsightwrap.ncu.output import MAX_LINE, OutputParser, parse_all

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "transcripts"
ALL_TRANSCRIPTS = sorted(p.name for p in TRANSCRIPTS.glob("*.jsonl"))


def chunks(name: str) -> list[str]:
    """The chunks of output as ncu's pipe delivered them."""
    rows = [json.loads(line) for line in (TRANSCRIPTS / name).read_text().splitlines()]
    return [r["out"] for r in rows if "out" in r]


def text(name: str) -> str:
    return "".join(chunks(name))


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def merged(events: list) -> list:
    """Consecutive Progress events of one kernel as one (the last).

    A run of marks gives one Progress event per chunk it arrives in, so only
    this merged form is the same however the stream is split.
    """
    out = []
    for e in events:
        if isinstance(e, Progress) and out and isinstance(out[-1], Progress) and out[-1].kernel_id == e.kernel_id:
            out[-1] = e
        else:
            out.append(e)
    return out


def feed_chunks(parts: list[str]) -> list:
    parser = OutputParser()
    events = [e for part in parts for e in parser.feed(part)]
    return merged(events + parser.close())


def parsed(text: str) -> list:
    """The events of a whole output, marks merged."""
    return merged(parse_all(text))


class Scans:
    """What the parser reads, counted instead of timed (issue 20: no timed unit tests; the clock failed one under a
    profiler): the characters its searches scan in the text fed (str.find and rfind, and the patterns that search
    unbounded text, _MARKER and _HEADER_END: up to the match, or to the end of the range given), and the Python
    calls it makes. Linear parsing scans each character a bounded number of times; rescanning is quadratic."""

    def __init__(self, monkeypatch) -> None:
        self.chars = 0
        self.calls = 0
        for name in ("_MARKER", "_HEADER_END"):
            monkeypatch.setattr(output_module, name, _CountedPattern(getattr(output_module, name), self))
        scans = self

        class Text(str):
            def find(self, sub, start=0, end=None):
                end = len(self) if end is None else min(end, len(self))
                i = str.find(self, sub, start, end)
                scans.chars += (i + len(sub) if i >= 0 else end) - start
                return i

            def rfind(self, sub, start=0, end=None):
                end = len(self) if end is None else min(end, len(self))
                i = str.rfind(self, sub, start, end)
                scans.chars += end - (i if i >= 0 else start)
                return i

        self.text = Text

    def feed(self, parser: OutputParser, text: str, size: int, calls: bool = False) -> list:
        """The events of `text` fed in chunks of `size` characters, counting what the parser reads meanwhile (and
        with `calls`, its calls: a profile hook, ~0.6 s of CPU a million calls, for the tests with few)."""
        def count(frame, event, arg):
            if event in ("call", "c_call"):
                self.calls += 1

        if calls:
            sys.setprofile(count)
        try:
            return [e for i in range(0, len(text), size) for e in parser.feed(self.text(text[i : i + size]))]
        finally:
            sys.setprofile(None)


class _CountedPattern:
    def __init__(self, pattern, scans: Scans) -> None:
        self.pattern, self.scans = pattern, scans

    def search(self, string, pos=0, endpos=sys.maxsize):
        m = self.pattern.search(string, pos, endpos)
        self.scans.chars += (m.end() if m else min(endpos, len(string))) - pos
        return m

    def __getattr__(self, name):
        return getattr(self.pattern, name)


def kernel(name: str, kid: int, dots=(4, 4), passes=38, nl="\n") -> tuple[str, list]:
    """A complete kernel-replay progress line and its events (the marks merged)."""
    out = f'==PROF== Profiling "{name}" - {kid}: 0%' + "." * dots[0] + "50%" + "." * dots[1]
    out += f"100% - {passes} passes{nl}"
    ev = [KernelStarted(name, kid), Progress(kid, "100%", 100, sum(dots)), KernelDone(name, kid, passes)]
    return out, ev


# -- the real transcripts ------------------------------------------------


def test_transcripts_present():
    assert "hang-at-0pct.jsonl" in ALL_TRANSCRIPTS and len(ALL_TRANSCRIPTS) >= 12


@pytest.mark.parametrize("name", ALL_TRANSCRIPTS)
def test_recorded_chunks_match_whole_text(name):
    assert feed_chunks(chunks(name)) == parsed(text(name))


@pytest.mark.parametrize("name", ALL_TRANSCRIPTS)
def test_one_char_at_a_time_matches_whole_text(name):
    assert feed_chunks(list(text(name))) == parsed(text(name))


def test_kernel_replay_full_set():
    ev = parsed(text("kernel-replay-full-set.jsonl"))
    assert ev[0] == Connected(769, "/app/ok")
    assert ev[1].text.startswith("Unable to access the following 6 metrics")
    done = of(ev, KernelDone)
    names = ["vec_add"] * 3 + ["block_reduce", "vec_add", "block_reduce", "vec_add", "block_reduce"]
    assert done == [KernelDone(n, i, 38) for i, n in enumerate(names)]
    assert of(ev, KernelStarted) == [KernelStarted(n, i) for i, n in enumerate(names)]
    # Each kernel: started, its marks (merged: the last one), done.
    first = ev[2 : 2 + 3]
    assert first == kernel("vec_add", 0)[1]
    assert ev[-4:] == [
        KernelDone("block_reduce", 7, 38),
        Output("ok: no error"),
        Disconnected(769),
        ReportWritten("/out/ok_full.ncu-rep"),
    ]


def test_hang_at_0pct():
    ev = parsed(text("hang-at-0pct.jsonl"))
    assert ev[:3] == [
        Connected(1455, "/app/hang_hostflag"),
        KernelStarted("wait_for_host", 0),
        Progress(0, ".", 0, 2),
    ]
    assert len(ev) == 4 and isinstance(ev[3], NcuWarning)
    assert "taking more time" in ev[3].text and ev[3].text.startswith(SLOW_LAUNCH_WARNING)
    assert not of(ev, KernelDone)


def test_hang_at_0pct_incremental_state():
    parser = OutputParser()
    parts = chunks("hang-at-0pct.jsonl")
    assert parser.feed(parts[0]) == [Connected(1455, "/app/hang_hostflag")]
    # The header alone is complete, but only the next char tells a progress
    # line from an application-replay line.
    assert parser.feed(parts[1]) == []
    assert parser.pending == '==PROF== Profiling "wait_for_host" - 0: '
    assert parser.in_progress is None
    # One event for the run of marks "0%..", not one per mark.
    assert parser.feed(parts[2]) == [KernelStarted("wait_for_host", 0), Progress(0, ".", 0, 2)]
    assert parser.in_progress == KernelStarted("wait_for_host", 0)
    assert parser.pending == ""
    (warning,) = parser.feed(parts[3])
    assert isinstance(warning, NcuWarning)
    assert parser.in_progress is None
    assert parser.close() == []


def test_hang_after_three_kernels():
    ev = parsed(text("hang-after-three-kernels-sigint.jsonl"))
    assert of(ev, KernelDone) == [KernelDone("vec_add", i, 10) for i in range(3)]
    assert of(ev, KernelStarted)[-1] == KernelStarted("wait_for_host", 3)
    last = [e for e in ev if isinstance(e, Progress) and e.kernel_id == 3]
    assert last[-1] == Progress(3, ".", 0, 2)
    assert SLOW_LAUNCH_WARNING in ev[-1].text


def test_application_replay():
    ev = parsed(text("application-replay.jsonl"))
    passes = of(ev, ReplayPass)
    assert len(passes) == 80
    assert passes[0] == ReplayPass("vec_add", 0, 1)
    assert passes[-1] == ReplayPass("block_reduce", 7, 10)
    assert not of(ev, KernelStarted) and not of(ev, KernelDone)
    assert len(of(ev, Connected)) == len(of(ev, Disconnected)) == 10
    i = ev.index(ReportCreation())
    assert ev[i + 1 : -1] == [Progress(None, "100%", 100, 19)]
    assert ev[-1] == ReportWritten("/out/ok_app.ncu-rep")


def test_hang_application_replay():
    ev = parsed(text("hang-application-replay.jsonl"))
    assert ev[:2] == [Connected(647, "/app/hang_hostflag"), ReplayPass("wait_for_host", 0, 1)]
    assert "'--replay-mode app-range'" in ev[2].text and len(ev) == 3


def test_pytorch_truncated_names():
    ev = parsed(text("pytorch-detailed-set.jsonl"))
    assert of(ev, KernelDone)[0] == KernelDone("nvjet_sm90_tst_256x128_64x4_1...", 0, 20)
    assert [d.passes for d in of(ev, KernelDone)] == [20] * 4
    assert Output("torch ok (4096, 4096)") in ev


def test_errors_and_warnings():
    assert parsed(text("unknown-section.jsonl")) == [
        NcuError("Option '--section NoSuchSection' did not match any section."),
        NcuError("Use --list-sections to see the list of available sections."),
    ]
    for opt in ("import-source", "kernel-name", "profile-from-start"):
        ev = parsed(text(f"range-replay-rejects-{opt}.jsonl"))
        assert ev == [NcuError(f"Option {opt} is not supported during range replay.")]
    ev = parsed(text("range-replay-no-ranges.jsonl"))
    assert ev[:4] == [
        Connected(690, "/app/hang_hostflag"),
        Output("hostflag: no error"),
        Disconnected(690),
        NcuWarning("No ranges were profiled."),
    ]


def test_program_output_only():
    ev = parsed(text("bundled-nsys-importer-fails.jsonl"))
    assert all(isinstance(e, Output) for e in ev)
    assert ev[-1] == Output("\t/out/nsys_ok.qdstrm")


# -- chunking invariance ---------------------------------------------------


@st.composite
def splits(draw, text: str) -> list[str]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=40))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(ALL_TRANSCRIPTS))
def test_any_split_of_a_transcript(data, name):
    whole = text(name)
    assert feed_chunks(data.draw(splits(whole))) == parsed(whole)


NAME = st.text(st.sampled_from('abcXYZ_0123456789 ."<>:,-'), min_size=1, max_size=20).filter(
    lambda s: '" - ' not in s and '": ' not in s  # a name with `": ` would end an ID-less header early
)
TEXT = st.text(st.sampled_from("abc XYZ 019 .,:;'()/%-_\t"), min_size=1, max_size=30).map(str.strip).filter(bool)
NL = st.sampled_from(["\n", "\r\n"])


@st.composite
def segments(draw) -> tuple[str, list]:
    """One piece of plausible ncu output and the events it must give."""
    nl = draw(NL)
    kind = draw(st.integers(0, 11))
    kid, n = draw(st.integers(0, 10**6)), draw(st.integers(1, 99))
    if kind == 0:
        exe = draw(TEXT)
        return f"==PROF== Connected to process {kid} ({exe}){nl}", [Connected(kid, exe)]
    if kind == 1:
        return f"==PROF== Disconnected from process {kid}{nl}", [Disconnected(kid)]
    if kind == 2:
        dots = (draw(st.integers(0, 12)), draw(st.integers(0, 12)))
        return kernel(draw(NAME), kid, dots, n, nl)
    if kind == 3:  # a hang: open progress line, then the slow-launch warning
        name, d = draw(NAME), draw(st.integers(0, 5))
        msg = SLOW_LAUNCH_WARNING + ". If this continues to hang, ..."
        out = f'==PROF== Profiling "{name}" - {kid}: 0%' + "." * d + f"\n==WARNING== {msg}{nl}"
        return out, [KernelStarted(name, kid), Progress(kid, "." if d else "0%", 0, d), NcuWarning(msg)]
    if kind == 4:
        name = draw(NAME)
        line = f'==PROF== Profiling "{name}" - {kid}: Application replay pass {n}{nl}'
        return line, [ReplayPass(name, kid, n)]
    if kind == 5:
        d = draw(st.integers(0, 25))
        out = "==PROF== Creating report from application replay data: 0%" + "." * d + "100%" + nl
        return out, [ReportCreation(), Progress(None, "100%", 100, d)]
    if kind == 6:
        t = draw(TEXT)
        return f"==WARNING== {t}{nl}", [NcuWarning(t)]
    if kind == 7:
        t = draw(TEXT)
        return f"==ERROR== {t}{nl}", [NcuError(t)]
    if kind == 8:
        t = draw(TEXT)
        return f"==PROF== Report: /out/{t}.ncu-rep{nl}", [ReportWritten(f"/out/{t}.ncu-rep")]
    if kind == 9:
        t = draw(TEXT)
        return f"==PROF== Note: {t}{nl}", [ProfNote(f"Note: {t}")]
    if kind == 10:
        return draw(st.sampled_from(["", " ", "\r"])) + nl, []
    # Program output that starts like progress marks would continue a progress line
    # that a warning cut (as ncu does for a slow kernel): see test_cut_progress_line_*.
    t = draw(TEXT.filter(lambda x: x[0] not in ".0123456789"))
    return t + nl, [Output(t)]


# 120 examples, not 300: twelve kinds of segment, each drawn ~100 times in 120 lists of up to 12, and the splits
# fall at every kind of point between them; the extra examples repeated those paths (1.4 s of CPU; issue 20).
@settings(max_examples=120, deadline=None)
@given(data=st.data(), segs=st.lists(segments(), max_size=12))
def test_synthetic_output_any_split(data, segs):
    whole = "".join(s for s, _ in segs)
    expected = [e for _, ev in segs for e in ev]
    assert parsed(whole) == expected
    assert feed_chunks(data.draw(splits(whole))) == expected


# Fragments that sit near every decision the parser makes, glued at random:
# the parser must never crash and must not depend on where chunks end.
FRAGMENTS = st.sampled_from([
    '==PROF== Profiling "', "==PROF== Creating report from application replay data: ",
    '"', '" - ', "0", "1", "5", "12", ": ", "%", ".", "0%", "50%", "100%", " - ",
    " passes", "Application replay pass ", "\n", "\r", "\r\n", " ", "x", "==WARNING== ",
    "==ERROR== ", "==PROF== ", "==", "Report: ",
])


@settings(max_examples=200, deadline=None)  # 200 x up to 40 of 28 fragments: each pair of them comes (issue 20)
@given(data=st.data(), parts=st.lists(FRAGMENTS, max_size=40))
def test_fragment_soup_any_split(data, parts):
    whole = "".join(parts)
    assert feed_chunks(data.draw(splits(whole))) == parsed(whole)


# -- edge cases --------------------------------------------------------------


def test_emits_only_when_determined():
    p = OutputParser()
    assert p.feed('==PROF== Profiling "k" - 1') == []
    assert p.feed("2: ") == []  # the ID was 12, not 1
    assert p.feed("1") == [KernelStarted("k", 12)]  # a mark starts: kernel replay
    assert p.feed("0") == []  # "10" may still be "100%"
    assert p.feed("0%") == [Progress(12, "100%", 100, 0)]
    assert p.in_progress == KernelStarted("k", 12)
    assert p.feed(" - 3 pass") == []
    assert p.feed("es") == []  # still waiting for the newline
    assert p.feed("\n") == [KernelDone("k", 12, 3)]
    assert p.in_progress is None
    assert p.feed(".") == []  # an ordinary line now: "." is not a mark
    assert p.close() == [Output(".")]


def test_names_with_quotes_dots_and_spaces():
    for name in ['a "quoted" name', 'op<"x">...', "with - dash: 3", 'trailing"', ""]:
        line, ev = kernel(name, 4, (1, 1), 10)
        assert parsed(line) == ev
        assert parsed(f'==PROF== Profiling "{name}" - 4: Application replay pass 2\n') == [
            ReplayPass(name, 4, 2)
        ]


def test_crlf():
    line, ev = kernel("k", 0, (2, 2), 10, "\r\n")
    assert parsed("a\r\n" + line + "==PROF== Report: /o/x.ncu-rep\r\n") == [
        Output("a"), *ev, ReportWritten("/o/x.ncu-rep")
    ]


def test_profiling_lookalikes_are_notes():
    assert parsed('==PROF== Profiling "unterminated name\n') == [ProfNote('Profiling "unterminated name')]
    assert parsed('==PROF== Profiling "k" - x: 0%\n') == [ProfNote('Profiling "k" - x: 0%')]
    assert parsed('==PROF== Profiling "k" - 3:0%\n') == [ProfNote('Profiling "k" - 3:0%')]
    # After a complete header, text that is neither a mark nor "Application replay pass N" is
    # program text cutting into the kernel's line (ncu prints nothing else there).
    assert parsed('==PROF== Profiling "k" - 3: range foo\n') == [KernelStarted("k", 3), Output("range foo")]
    assert parsed("==PROF== Profiling is slow\n") == [ProfNote("Profiling is slow")]
    # ncu's line glued after program text (here blanks) is still ncu's: see test_glued_to_program_output.
    assert parsed("  ==PROF== Profiling \"k\" - 0: 0%\n") == [KernelStarted("k", 0), Progress(0, "0%", 0, 0)]


def test_unexpected_char_in_progress_falls_back_to_a_line():
    ev = parsed('==PROF== Profiling "k" - 0: 0%..5x oops\nnext\n')
    assert ev == [
        KernelStarted("k", 0),
        Progress(0, ".", 0, 2),
        Output("5x oops"),  # the unfinished "5" is kept
        Output("next"),
    ]
    # A tail that is not " - N passes" cuts the line without KernelDone.
    assert parsed('==PROF== Profiling "k" - 0: 0%.100% done\n')[-1] == Output(" done")
    # An ncu line glued to an open progress line is still recognised.
    assert parsed('==PROF== Profiling "k" - 0: 0%.==WARNING== slow\n')[-1] == NcuWarning("slow")


def test_close_flushes():
    assert parsed("no newline") == [Output("no newline")]
    assert parsed("==PROF== Report: /o/r.ncu-rep") == [ReportWritten("/o/r.ncu-rep")]
    # An unfinished progress line gives nothing more at close.
    assert parsed('==PROF== Profiling "k" - 0: 0%..5') == [KernelStarted("k", 0), Progress(0, ".", 0, 2)]
    assert parsed('==PROF== Profiling "k" - 0: 100% - 3 passes')[-1] == Progress(0, "100%", 100, 0)
    # A header with nothing after it: the kernel had started.
    assert parsed('==PROF== Profiling "k" - 7: ') == [KernelStarted("k", 7)]
    p = OutputParser()
    p.feed("partial")
    assert p.pending == "partial"
    assert p.close() == [Output("partial")] and p.pending == ""


def test_blank_lines_give_nothing():
    assert parsed("\n\r\n  \n\n") == []


def test_huge_line_is_linear_and_bounded(monkeypatch):
    """A line is kept up to MAX_LINE characters; the rest is counted, not kept."""
    for start in ("x", '==PROF== Profiling "'):
        big = start + "y" * (2 << 20)
        scans, p = Scans(monkeypatch), OutputParser()
        events = scans.feed(p, big, 4096, calls=True) + p.feed("\n")
        (event,) = events
        cut = len(big) - MAX_LINE
        assert event.text.endswith(f"y [... {cut} more characters]") and len(event.text) < MAX_LINE + 40
        assert scans.chars <= 8 * len(big), scans.chars  # each character read a few times (2), not once per chunk
        assert scans.calls <= 60 * (len(big) // 4096), scans.calls  # work per chunk, not per character


def test_many_small_chunks_of_a_long_line_is_linear(monkeypatch):
    big = '==PROF== Profiling "' + "y" * 200_000
    scans, p = Scans(monkeypatch), OutputParser()
    scans.feed(p, big, 16)
    assert p.feed('" - 1: 0%\n')[0] == KernelStarted("y" * 200_000, 1)
    # A header's end is looked for in the new text and the few characters kept before it, not in the whole line.
    chunks = len(big) // 16
    assert scans.chars <= 8 * len(big) + 2 * output_module._HEADER_END_MAX * chunks, scans.chars  # 7 a character


GLUED = [
    '==PROF== Profiling "k" - 0: 0%....50%....100% - 10 passes\n',
    '==PROF== Profiling "k" - 3: 0%..',
    "==PROF== Connected to process 12 (/bin/app)\n",
    "==WARNING== Launching the workload is taking more time than expected.\n",
    "==ERROR== Failed to profile\n",
]


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.sampled_from("abc XYZ 019 .,:;|#%-_\t\r"), min_size=1, max_size=30),
       seg=st.sampled_from(GLUED), data=st.data())
def test_glued_to_program_output(text, seg, data):
    """A program that prints without a newline (tqdm, print(end="")) glues ncu's next line to its own."""
    whole = text + seg
    expected = ([Output(text.removesuffix("\r"))] if text.removesuffix("\r").strip() else []) + parsed(seg)
    assert parsed(whole) == expected
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=8)))
    pieces = [whole[a:b] for a, b in zip([0] + cuts, cuts + [len(whole)])]
    assert feed_chunks(pieces) == expected


# -- headers without an ID (ncu 2025.3.1 with a kernel-name filter) -----------

# As ncu printed it on the GPU machine (H100, 2026-11-26) for
# `ncu --set basic --kernel-name 'regex:^(?!(?:wait_for_host)$).*' app third 20`.
UNNUMBERED = (
    "==PROF== Connected to process 1208 (/tmp/nw/app)\n"
    '==PROF== Profiling "vec_add": 0%....50%....100% - 10 passes\n'
    '==PROF== Profiling "block_reduce": 0%....50%....100% - 10 passes\n'
    "hang kernel result 1 (released by host)\n"
    '==PROF== Profiling "vec_add": 0%....50%....100% - 10 passes\n'
    '==PROF== Profiling "block_reduce": 0%....50%....100% - 10 passes\n'
    "third: no error\n"
    "==PROF== Disconnected from process 1208\n"
    "==PROF== Connected to process 1300 (/tmp/nw/app)\n"
    '==PROF== Profiling "wait_for_host": 0%..'
)


def test_unnumbered_headers_are_numbered_per_process():
    events = parsed(UNNUMBERED)
    assert [(e.name, e.kernel_id, e.passes) for e in of(events, KernelDone)] == [
        ("vec_add", 0, 10), ("block_reduce", 1, 10), ("vec_add", 2, 10), ("block_reduce", 3, 10)]
    assert of(events, KernelStarted)[-1] == KernelStarted("wait_for_host", 0)
    assert of(events, Progress)[-1] == Progress(0, ".", 0, 2)


def test_unnumbered_open_header_is_pending():
    parser = OutputParser()
    parser.feed('==PROF== Profiling "wait_for_host": ')
    assert parser.pending_header == KernelStarted("wait_for_host", 0)


def test_unnumbered_application_replay_lines():
    events = parsed('==PROF== Connected to process 7 (/a)\n==PROF== Profiling "k": Application replay pass 1\n'
                       '==PROF== Profiling "j": Application replay pass 1\n==PROF== Connected to process 8 (/a)\n'
                       '==PROF== Profiling "k": Application replay pass 2\n')
    assert of(events, ReplayPass) == [ReplayPass("k", 0, 1), ReplayPass("j", 1, 1), ReplayPass("k", 0, 2)]


@given(data=st.data())
def test_unnumbered_any_split(data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(UNNUMBERED)), max_size=30)))
    parts = [UNNUMBERED[a:b] for a, b in zip([0] + cuts, cuts + [len(UNNUMBERED)])]
    assert feed_chunks(parts) == parsed(UNNUMBERED)


# -- cost: linear in the input, independent of the number of dots --------------


def test_progress_dots_cost_one_event_per_run_not_per_dot(monkeypatch):
    """10 MB of dots (benchmarks/parser_cost.py times it; here the operation count)."""
    n = 10 << 20
    line = '==PROF== Profiling "k" - 0: 0%' + "." * n + "100% - 10 passes\n"
    scans = Scans(monkeypatch)
    events = scans.feed(OutputParser(), line, 65536, calls=True)
    chunks = -(-len(line) // 65536)
    assert len(events) <= chunks + 2  # KernelStarted, one Progress per chunk of dots, KernelDone
    assert events[-2] == Progress(0, "100%", 100, n) and events[-1] == KernelDone("k", 0, 10)
    assert scans.calls <= 200 * chunks, scans.calls  # per run of marks, not per dot (one event per dot took 58 s)


def test_glued_markers_are_not_rescanned(monkeypatch):
    """ncu lines glued to program text without newlines: each split resumes where the last ended."""
    glued = "x==WARNING== w" * 40_000  # 560 kB in one chunk; rescanning the rest at each split is quadratic
    scans, p = Scans(monkeypatch), OutputParser()
    events = merged(scans.feed(p, glued, len(glued)) + p.close())
    assert events == [Output("x")] + [NcuWarning("wx")] * 39_999 + [NcuWarning("w")]
    assert scans.chars <= 8 * len(glued), scans.chars  # ~3 a character; quadratic: ~40,000 x 280 kB


def test_launch_count_numbers_the_profiled_launches():
    # ncu 2025.3.1 with --launch-count (GPU machine, 2026-11-26): `"k" - ID (i/N): `.
    text = ('==PROF== Profiling "nsightwrap_probe" - 0 (1/1): 0%....50%....100% - 1 pass\n'
            '==PROF== Profiling "k" - 3 (2/2): 0%..')
    events = parse_all(text)
    started = [e for e in events if type(e).__name__ == "KernelStarted"]
    done = [e for e in events if type(e).__name__ == "KernelDone"]
    assert [(e.name, e.kernel_id) for e in started] == [("nsightwrap_probe", 0), ("k", 3)]
    assert [e.passes for e in done] == [1]

"""Which parts of a recorded (merged) ncu transcript are ncu's own and which the program's.

ncu writes its output in small pieces: a kernel header `==PROF== Profiling
"k" - 3: `, then each mark (`0%`, `.`, `50%`, `100% - 10 passes` with its
newline), and every other message as a whole line. These pieces are the
"atoms": the program's writes can only fall between them. The fake ncu uses
this to send a recorded transcript's ncu pieces to `--log-file` and the
program's lines to stdout; the tests use it to inject program text at every
point where a real program could have printed.
"""
import re

MARKERS = ("==PROF==", "==WARNING==", "==ERROR==")
_HEADER = re.compile(r'==PROF== (?:Profiling "[^\n]*?"(?: - \d+)?(?: \(\d+/\d+\))?'
                     r'|Creating report from application replay data): ')
_MARK = re.compile(r"\.|\d{1,3}%(?: - \d+ pass(?:es)?\n)?")


def atoms(text):
    """[(kind, start, end)] covering `text`; kind is "ncu" or "program"."""
    out, i, n = [], 0, len(text)
    in_marks = cut = False
    last_disconnect = text.rfind("==PROF== Disconnected")
    results_from = text.find("\n", last_disconnect) + 1 if last_disconnect >= 0 else n
    while i < n:
        at_line_start = i == 0 or text[i - 1] == "\n"
        if in_marks or (cut and at_line_start and text[i] in ".0123456789"):
            m = _MARK.match(text, i)
            if m:
                out.append(("ncu", i, m.end()))
                i, cut = m.end(), False
                in_marks = not m.group().endswith("\n")
                continue
            if in_marks and text[i] == "\n":  # ncu cuts its own line (the slow-launch warning follows)
                out.append(("ncu", i, i + 1))
                i, in_marks, cut = i + 1, False, True
                continue
            in_marks = False
        m = _HEADER.match(text, i)
        if m and not text.startswith("Application replay pass", m.end()):
            out.append(("ncu", i, m.end()))
            i, in_marks, cut = m.end(), True, False
            continue
        nl = text.find("\n", i)
        end = n if nl < 0 else nl + 1
        ncu = text.startswith(MARKERS, i) or i >= results_from or not text[i:end].strip()
        out.append(("ncu" if ncu else "program", i, end))
        i = end
    return out


def split_chunk(text, spans, a, b):
    """The pieces of text[a:b] as [(kind, piece)], in order."""
    pieces = []
    for kind, s, e in spans:
        if e <= a or s >= b:
            continue
        pieces.append((kind, text[max(a, s):min(b, e)]))
    return pieces

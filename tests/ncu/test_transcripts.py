"""The watched run on real ncu output: the fake replays recorded transcripts
byte for byte with their own timing (20x faster, the two slow ones 10x; stall timeouts scaled alike).

By default ncu's pieces go to its --log-file and the program's lines to
stdout (split as tests/fake_ncu/ncutext.py says); a few cases also run with
everything merged on stdout, the fallback for an ncu that cannot log to a file."""

import pytest
from helpers import DATA, TIME_SCALE, app, assert_tree_gone, run_config

from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions

SCALE = TIME_SCALE
DEFAULT_STALL_S = 10.0  # the default stall timeout, scaled with the replay
#: Most runs replay 20x faster: their progress comes at most ~1.5 s apart before a hang (its first kernel's start;
#: within kernels ~0.5 s) and the ok ones passed with a stall timeout of 0.1 s at this scale, so the 0.5 s stall
#: timeout of this scale leaves them the margin STALL_S leaves the fakes' kernels (0.4 s); a hang's slow-launch
#: warning (3 s after its last mark) still comes before the verdict. The two slow runs (marks 3 s apart, a 5 s
#: pass) keep 10x: 20x would leave them a margin of 0.25 s.
SLOW = {"slow.jsonl", "slow-one-pass-5s.jsonl"}
QUICK_SCALE = 0.05

CASES = [
    # transcript, status, stalled kernel, kernels completed
    ("transcripts/kernel-replay-full-set.jsonl", "ok", None, 8),
    ("transcripts/pytorch-detailed-set.jsonl", "ok", None, 4),
    ("transcripts/application-replay.jsonl", "ok", None, 8),
    ("transcripts/hang-at-0pct.jsonl", "hang", "wait_for_host", 0),
    ("transcripts/hang-after-three-kernels-sigint.jsonl", "hang", "wait_for_host", 3),
    ("transcripts/hang-application-replay.jsonl", "hang", "wait_for_host", 1),
    ("transcripts/range-replay-no-ranges.jsonl", "no-kernels", None, 0),
    ("transcripts/unknown-section.jsonl", "error", None, 0),
    ("gpu-transcripts/slow.jsonl", "ok", None, 1),  # 1.5 s passes, marks 3 s apart
    ("gpu-transcripts/slow-one-pass-5s.jsonl", "ok", None, 1),  # warning cuts the line, then 5 s to 100%
    ("gpu-transcripts/hang-inner-SIGINT.jsonl", "hang", "wait_for_host", 3),
    ("gpu-transcripts/none.jsonl", "no-kernels", None, 0),
]


MERGED = {"hang-after-three-kernels-sigint.jsonl", "slow-one-pass-5s.jsonl", "hang-application-replay.jsonl",
          "pytorch-detailed-set.jsonl"}
RUNS = [(*c, True) for c in CASES] + [(*c, False) for c in CASES if c[0].split("/")[-1] in MERGED]


@pytest.mark.parametrize("name,status,stalled,n_kernels,log_channel", RUNS,
                         ids=[r[0].split("/")[-1] + ("" if r[4] else "-merged") for r in RUNS])
def test_replayed_transcript(name, status, stalled, n_kernels, log_channel, fake_env, tmp_path, monkeypatch):
    scale = SCALE if name.split("/")[-1] in SLOW else QUICK_SCALE
    stall = DEFAULT_STALL_S * scale  # the default stall timeout, on the replay's clock
    monkeypatch.setenv("FAKE_NCU_TRANSCRIPT", str(DATA / name))
    monkeypatch.setenv("FAKE_NCU_SCALE", str(scale))
    cfg = run_config(tmp_path, report_dir=str(tmp_path), stall_timeout=stall, log_channel=log_channel)
    a = profile_command(app(), ProfileOptions(set="basic"), cfg)
    assert a.status == status, a.describe()
    assert a.stalled_kernel == stalled
    assert len(a.kernels) == n_kernels
    if status == "hang":
        assert a.detection_s < stall + 0.5
        assert a.report is not None  # the partial report is kept
    assert_tree_gone(a.cookie)

"""A stop that comes while ncu's launcher script is still starting its front end (FACTS.md: the launcher is a shell
script that runs the front end as a child): SIGINT reached only the script, which does nothing with it, and the stop
waited its whole grace (5 s from the command line) before SIGTERM. Found in the suite: a sweep's SIGTERM test took
5 s instead of 0.1 s about one time in six. The front end that starts during the grace now gets SIGINT too."""

from __future__ import annotations

from helpers import app, assert_tree_gone, run_config

from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.watch.tree import StopPolicy


def test_a_front_end_that_starts_during_the_grace_gets_sigint_and_the_stop_takes_no_grace(fake_env, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("FAKE_NCU_LAUNCH_DELAY", "1.5")  # the stop (total timeout 0.2 s) comes well before the front end
    config = run_config(tmp_path, timeout=0.2, stop=StopPolicy(grace=20.0, term_wait=2.0, kill_wait=3.0))
    a = profile_command(app("vec_add", "k@hang"), ProfileOptions(set="basic"), config)  # it ends only when stopped
    assert_tree_gone(a.cookie)
    steps = a.stop.steps
    assert steps[0].startswith("SIGINT to profiler") and "started since" in steps[1], steps
    assert a.stop.graceful and a.stop.duration_s < 10, a.stop  # not the 20 s grace: the front end heard SIGINT

"""`main(argv)` called in a process that goes on (a script, a test, helpers.cli_main): the command's hang store is
closed once it answered, and nsightwrap's logger is left as the command found it (the review of issue 20's
in-process tests found both: the store stayed open until some later garbage collection, the logger at DEBUG)."""

from __future__ import annotations

import gc
import logging
import os

import pytest
from helpers import app, cli_main

from nsightwrap.cli.common import LOGGER


def _open_paths(prefix: str) -> list[str]:
    """The files this process holds open under `prefix` (the store's file and its -wal/-shm)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            found.append(target)
    return found


@pytest.mark.parametrize("argv", [
    ["run", "--json", "-q", "--verbose", "--profile", "quick", "--stall-timeout", "0.6", "-o", "r"],
    ["sweep-sections", "--json", "-q", "--verbose", "--section", "SourceCounters", "--section", "LaunchStats",
     "--stall-timeout", "0.6"],
], ids=["run --profile", "sweep-sections"])
def test_the_store_is_closed_and_the_logger_left_as_found_once_the_command_answered(argv, fake_env, tmp_path,
                                                                                   capsys):
    logger = logging.getLogger(LOGGER)
    level, handlers = logger.level, list(logger.handlers)
    gc.collect()  # what earlier tests of this process left for the collector is not this command's
    code, out, err = cli_main([*argv, "--store", str(tmp_path / "h.db"), "--",
                               *app("vec_add", "k@hang-if=SourceCounters", "vec_add")], capsys)
    assert code in (0, 3), err
    assert _open_paths(str(tmp_path / "h.db")) == []  # no collection in between: closed by the command itself
    assert logger.level == level and logger.handlers == handlers

"""The password of a store URL travels to the probes' jobs in a 0600 file, whichever form it was given in
(``user:pw@`` or ``?password=``); the file has a unique name and is unlinked when the engine closes, also in a
user-given --executor-folder."""

from __future__ import annotations

import os
import stat

import pytest

from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.probejob import StoreSetting
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.store.location import StoreLocation


class _NoJobs:
    def room(self):
        return 1

    def exhausted(self):
        return None


@pytest.mark.parametrize("url", ["postgresql://team:s3cret@db.example/hangs",
                                 "postgresql://team@db.example/hangs?password=s3cret",
                                 "postgresql://team@db.example/hangs?sslmode=require&password=s3cret"])
def test_a_store_password_in_either_form_travels_in_a_0600_file(tmp_path, url):
    kept = StoreSetting.keep(url, tmp_path)
    assert "s3cret" not in kept.public and kept.secret_file is not None
    assert stat.S_IMODE(os.stat(kept.secret_file).st_mode) == 0o600
    again = kept.setting()
    assert StoreLocation(url=again).password == "s3cret"
    assert ("sslmode=require" in again) == ("sslmode" in url)


def test_the_password_file_has_a_unique_name_and_goes_when_the_engine_closes(tmp_path):
    folder = tmp_path / "my-jobs"  # as --executor-folder: the engine does not own it
    folder.mkdir()
    engine = ProbeEngine(ExecutorSpec("local", poll_s=0.01), _NoJobs(), folder, owned=False)
    first = engine.keep_store("postgresql://team:s3cret@db/hangs")
    second = engine.keep_store("postgresql://team:s3cret@db/hangs")
    assert first.secret_file != second.secret_file and all(os.path.exists(k.secret_file) for k in (first, second))
    engine.close()
    assert folder.is_dir() and list(folder.iterdir()) == []

"""Fix batch A, item 9: a document's string under a secret-looking key is masked, Authorization / X-Api-Key
in a dict's repr or JSON too; a bundle takes only run folders named by a plain cookie."""

from __future__ import annotations

import json
import zipfile

import pytest

from nsightwrap.cli.bundle import hang_bundle
from nsightwrap.secrets import MASK, mask_doc, mask_text
from nsightwrap.store import Environment, HangStore, ProfileKey

H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")


def test_a_string_under_a_secret_looking_key_is_masked_whole():
    doc = mask_doc({"HF_TOKEN": "abc", "env": {"api_key": "xyz", "AWS_SECRET_ACCESS_KEY": "q"}, "key": "set=full",
                    "kernel": "void f<key=1>", "max_tokens": "5", "first_pass": True})
    assert doc == {"HF_TOKEN": MASK, "env": {"api_key": MASK, "AWS_SECRET_ACCESS_KEY": MASK}, "key": "set=full",
                   "kernel": "void f<key=1>", "max_tokens": "5", "first_pass": True}


@pytest.mark.parametrize("text", ["{'Authorization': 'Basic czNjcmV0'}", '{"Authorization": "Basic czNjcmV0"}',
                                  "{'X-Api-Key': 'czNjcmV0'}", '{"X-Api-Key":"czNjcmV0"}',
                                  "headers={'Proxy-Authorization': 'czNjcmV0'}", '{"token": "czNjcmV0"}'])
def test_headers_in_a_dict_repr_or_json_are_masked(text):
    masked = mask_text(text)
    assert "czNjcmV0" not in masked and MASK in masked


def test_plain_words_with_colons_stay():
    assert mask_text("key: v token:abc {'key': 'set=full'}") == "key: v token:abc {'key': 'set=full'}"


def test_a_bundle_takes_no_folder_of_a_run_id_that_is_no_cookie(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.txt").write_text("not the run's")
    runs = tmp_path / "runs" / "deep"
    runs.mkdir(parents=True)
    good = "b" * 32
    (runs / good).mkdir()
    (runs / good / "transcript.log").write_text("a line\n")
    store = tmp_path / "hangs.db"
    with HangStore(store) as s:
        for run_id in ("../../outside", good):
            s.record("k", ProfileKey(set="full"), "hang", env=H200, stall_s=3.0, command=["./a"], run_id=run_id)
    made = hang_bundle("k", tmp_path / "b.zip", store=store, runs_folder=runs, env={}, versions=lambda env: {})
    with zipfile.ZipFile(tmp_path / "b.zip") as z:
        names = z.namelist()
    assert made.runs == [good] and "../../outside" in made.runs_missing
    assert not any("private.txt" in n or ".." in n for n in names), names
    assert json.dumps(made.to_dict())

"""The probe engine's rules (fix batch A): a store the node cannot open is no broken GPU; a probe whose GPU
keeps processes is recorded (as Session.attempt records) and its GPU set aside; a dispatcher that dies answers
every waiting caller; the error says where the job logs are."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from helpers import app, run_config

import nsightwrap.ncu.engine as engine_module
from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.collectives import JobShape
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.probejob import ProbeTask, StoreSetting, run_probe
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore


def _task(tmp_path, env, store: StoreSetting) -> ProbeTask:
    command = app("vec_add")
    return ProbeTask(tuple(command), ProfileOptions(set="basic"), run_config(tmp_path, env=env), store,
                     JobShape.of(command))


def test_a_probe_whose_gpu_keeps_processes_is_recorded_and_reported(tmp_path, fake_env, monkeypatch):
    real = engine_module.build_attempt
    monkeypatch.setattr(engine_module, "build_attempt",
                        lambda *a, **kw: real(*a, **{**kw, "gpu_left_after": ["123 (app)"]}))
    reply = run_probe(_task(tmp_path, fake_env, StoreSetting(str(tmp_path / "h.db"))))
    assert reply["attempt"].gpu_left_after and reply["recorded"]
    with HangStore(tmp_path / "h.db", readonly=True) as store:
        assert any(r.kernel == "vec_add" for r in store.records())


def test_a_store_the_node_cannot_open_is_reported_not_run(tmp_path, fake_env):
    (tmp_path / "a-file").write_text("")
    reply = run_probe(_task(tmp_path, fake_env, StoreSetting(str(tmp_path / "a-file" / "h.db"))))
    assert reply["attempt"] is None and "hang store" in reply["store_error"]


class Job:
    def __init__(self, reply, job_id="job-0"):
        self.reply, self.job_id, self.cancelled = reply, job_id, False

    def done(self):
        return True

    def result(self):
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    def cancel(self, check=True):
        self.cancelled = True


class Backend:
    def __init__(self, replies, submit_error=None):
        self.replies, self.aside, self.released, self.jobs, self.submit_error = list(replies), [], [], [], submit_error

    def room(self):
        return 1

    def submit(self, tasks):
        if self.submit_error is not None:
            raise self.submit_error
        self.jobs += [Job(self.replies.pop(0)) for _ in tasks]
        return [(j, "0") for j in self.jobs[-len(tasks):]]

    def release(self, slot):
        self.released.append(slot)

    def set_aside(self, slot, job, reply):
        self.aside.append(slot)
        return f"GPU {slot}"

    def exhausted(self):
        return None


def _engine(backend, folder, owned=False, retries=2):
    return ProbeEngine(ExecutorSpec("local", retries=retries, poll_s=0.01), backend, folder, owned=owned)


def test_a_store_error_on_the_node_fails_the_probe_without_setting_its_gpu_aside(tmp_path):
    backend = Backend([{"host": "node7", "gpu": "0", "status": "error", "attempt": None,
                        "store_error": "the hang store /x/h.db cannot be created"}])
    with _engine(backend, tmp_path) as e, \
            pytest.raises(NsightwrapError, match="could not open the hang store on node7"):
        e.run("probe")
    assert backend.aside == [] and backend.released == ["0"]


class Boom(Exception):
    pass


def test_a_dispatcher_that_dies_answers_every_waiting_caller(tmp_path, monkeypatch):
    e = _engine(Backend([]), tmp_path)
    real = e._submit_some

    def dies_once_two_wait():
        if len(e.pending) == 2:
            raise Boom("a bug in the dispatcher")
        return real()
    monkeypatch.setattr(e, "_submit_some", lambda: None)  # nothing submitted until both callers wait
    errors = []

    def one():
        try:
            e.run("probe")
        except NsightwrapError as x:
            errors.append(str(x))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    # Both callers queued before the dispatcher may submit: with one queued, the real _submit_some submitted it
    # to a backend with no reply left, and the dispatcher died of that IndexError instead (a flake, 1 run in ~30).
    waited = time.monotonic() + 10
    while len(e.pending) < 2:
        assert time.monotonic() < waited, "the two callers never both waited"
        time.sleep(0.005)
    monkeypatch.setattr(e, "_submit_some", dies_once_two_wait)
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads) and len(errors) == 2
    assert all("probe engine stopped (Boom: a bug in the dispatcher)" in x for x in errors)
    with pytest.raises(NsightwrapError, match="probe engine stopped"):
        e.run("later")
    e.close()


def test_out_of_retries_the_error_says_where_the_job_logs_are(tmp_path):
    failing = [RuntimeError("node failure")] * 2
    with _engine(Backend(failing), tmp_path, retries=1) as e, pytest.raises(NsightwrapError) as given:
        e.run("probe")
    assert f"see the job logs in {tmp_path}" in str(given.value)
    with _engine(Backend(list(failing)), tmp_path / "own", owned=True, retries=1) as e, \
            pytest.raises(NsightwrapError) as own:
        e.run("probe")
    assert "--executor-folder DIR to keep them" in str(own.value)


def test_a_gpu_that_keeps_processes_is_still_set_aside(tmp_path):
    kept = {"host": "h", "gpu": "0", "status": "ok", "recorded": True,
            "attempt": SimpleNamespace(gpu_left_after=("4242 app",))}
    ok = {**kept, "attempt": SimpleNamespace(gpu_left_after=())}
    backend = Backend([kept, ok])
    with _engine(backend, tmp_path) as e:
        assert e.run("probe") is ok
    assert backend.aside == ["0"]

"""Probes on a cluster engine (submitit): one job per probe, on the local GPUs or on Slurm.

A probe travels as a ProbeTask, run on the node by run_probe, on one of the
backends (submitit's local or Slurm executor): nsightwrap.fallback.probejob.
nsightwrap.fallback.engineattempts makes the task of a sweep's probe or a walk's attempt.

One dispatcher thread owns the submitit jobs (ProbeEngine). The sweep's
threads hand it tasks and wait; it submits them (at once, as one job array on
Slurm: executor.batch()), polls the jobs, and answers each caller. Each task
belongs to a chain (the whole-program runs are one, each kernel's probes
another: a chain's jobs depend on each other, so it has one at a time); when
tasks wait for a GPU, the chain that has had the fewest jobs goes first (a
chain just begun has the most work left: on 2 GPUs the last kernel found
starts at once instead of waiting behind the whole-program run that may find
nothing), a retried probe before all. The engine keeps each job's timeline
(JobTimes: where it ran, when it was submitted, started and ended on the
node, and seen here). A job that
fails (node failure, job error) or whose GPU keeps processes is set aside (the
local GPU is no longer used; the Slurm node is excluded) and its probe runs
again elsewhere, at most `retries` times. cancel() (Ctrl-C) cancels every
queued and running job.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import psutil

from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.announce import read_suspect
from nsightwrap.fallback.probejob import LocalBackend, ProbeTask, SlurmBackend, StoreSetting
from nsightwrap.fallback.spec import LOCAL, ExecutorSpec
from nsightwrap.ncu.engine import SWEEP_VAR
from nsightwrap.paths import jobs_dir, make_private_dirs
from nsightwrap.secrets import mask_text
from nsightwrap.watch import gpu
from nsightwrap.watch.tree import StopPolicy, alive, descendants_of, processes_with, stop_processes

__all__ = ["JobTimes", "ProbeEngine", "local_gpus", "open_engine"]

log = logging.getLogger("nsightwrap")

#: How long cancel() waits for cancelled local jobs to stop their probes, before it stops what is left itself.
LOCAL_CANCEL_WAIT_S = 10.0

#: How long a chain that has just been answered keeps its claim on a GPU (seconds): its thread decides on the
#: reply and asks again (usually within milliseconds, more with a remote store to ask first); meanwhile a task of
#: a chain that would go after it does not take that GPU. chain_done() ends a claim at once.
CLAIM_S = 1.0


# --- the dispatcher ----------------------------------------------------------------


@dataclass
class JobTimes:
    """One job's timeline (wall clock, seconds since the epoch): submitted and seen here, began and ended on
    the node (run_probe), the attempt's own start and end there; what ran it (the GPU, or host:GPU)."""

    chain: str
    where: Optional[str]
    submitted: float
    seen: Optional[float] = None
    node: dict = field(default_factory=dict)  # began, attempt_start, attempt_end, ended (run_probe's reply)
    speculative: bool = False  # started as a speculation (see ProbeEngine.speculate)
    dropped: bool = False  # a speculation nobody took: cancelled, or its reply unused

    def overhead(self) -> dict[str, Optional[float]]:
        """Seconds from the submission to the attempt's start, and from its end to the reply seen here."""
        start, end = self.node.get("attempt_start"), self.node.get("attempt_end")
        return {"to_start_s": None if start is None else start - self.submitted,
                "to_seen_s": None if end is None or self.seen is None else self.seen - end}


@dataclass
class _Ticket:
    task: ProbeTask
    chain: str = ""  # the whole-program runs (""), or a kernel's probes: one job at a time each
    seq: int = 0  # order of arrival
    queued: Optional[Callable[[], None]] = None  # told once the ticket waits in the queue
    tries: int = 0
    reply: Optional[dict] = None
    error: Optional[BaseException] = None
    done: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)
    on_suspect: Optional[Callable[[str], None]] = None  # told each kernel the job announces (see speculate)
    heard: int = 0  # announcements told so far
    heard_stamp: Optional[tuple[int, int]] = None  # the announcement file's (mtime, size) when last read
    speculative: bool = False  # submitted by speculate(), not yet taken by a run()
    dropped: bool = False  # a speculation given up: its job cancelled, its reply unused
    times: Optional[JobTimes] = None


class ProbeEngine:
    """Runs ProbeTasks as submitit jobs; run() blocks its caller until the probe's dict is back."""

    def __init__(self, spec: ExecutorSpec, backend: Any, folder: Path, owned: bool,
                 on_counts: Optional[Callable[[str], None]] = None) -> None:
        self.spec, self.backend, self.folder, self.owned = spec, backend, folder, owned
        self.token = uuid.uuid4().hex  # the sweep's token (SWEEP_VAR) in its probes' environment
        self.on_counts = on_counts
        self.pending: deque[_Ticket] = deque()
        self.running: list[tuple[Any, Optional[str], _Ticket]] = []
        self.finished = 0
        self.served: dict[str, int] = {}  # jobs submitted per chain
        self.timeline: list[JobTimes] = []  # every job submitted, in order
        self._seq = 0
        self._speculations: list[_Ticket] = []  # started by speculate(), not yet taken by run() nor dropped
        self._claims: dict[str, float] = {}  # chain just answered -> until when it may ask again first
        self.claim_s = CLAIM_S
        self.cond = threading.Condition()
        self.closed = False
        self.failure: Optional[str] = None  # why the dispatcher stopped, if it died
        self._shown = (0, 0, 0)
        self._kept: list[StoreSetting] = []  # their password files, unlinked at close
        self.stop_policy = StopPolicy()  # how cancel() stops what its local jobs leave running
        self.cancel_wait_s = LOCAL_CANCEL_WAIT_S
        self.thread = threading.Thread(target=self._loop, name="nsightwrap-probe-engine", daemon=True)
        self.thread.start()

    @property
    def parallel(self) -> int:
        """Probes worth waiting on at once."""
        return max(1, min(self.backend.room(), 64))

    def keep_store(self, setting: str) -> StoreSetting:
        """The store setting for this engine's tasks: its password in a 0600 file of the job folder, unlinked
        when the engine closes (also when the folder is the user's --executor-folder)."""
        kept = StoreSetting.keep(setting, self.folder)
        self._kept.append(kept)
        return kept

    def counts(self) -> tuple[int, int, int]:
        """(queued, running, finished) probes."""
        with self.cond:
            return len(self.pending), len(self.running), self.finished

    def run(self, task: ProbeTask, chain: str = "", queued: Optional[Callable[[], None]] = None,
            on_suspect: Optional[Callable[[str], None]] = None) -> dict:
        """The probe's reply, once its job is done. chain: what the task belongs to (see the module docstring);
        queued: called once the task waits in the queue (a caller that starts a chain waits for that);
        on_suspect: told (in the dispatcher's thread) each kernel the job announces as suspect while it runs.
        A speculation of the chain with the same options (speculate) is taken instead of a new job; the
        chain's other speculations are dropped."""
        with self.cond:
            if self.failure is not None:
                raise NsightwrapError(self.failure)
            if self.closed:
                raise KeyboardInterrupt("interrupted: the engine's jobs were cancelled")
            ticket, dropped = self._adopt(task, chain)
            self._claims.pop(chain, None)
            if ticket is None:
                ticket = self._ticket(task, chain, queued, announce=on_suspect is not None)
                self.pending.append(ticket)
            ticket.on_suspect = on_suspect
            self.cond.notify_all()
        _cancel_jobs(dropped)
        if queued is not None:
            queued()
        while not ticket.done.wait(0.5):  # short waits: Ctrl-C reaches the main thread between them
            pass
        if ticket.error is not None:
            raise ticket.error
        assert ticket.reply is not None
        return ticket.reply

    def speculate(self, task: ProbeTask, chain: str = "") -> bool:
        """Start `task` now, before its chain asks for it, on a local GPU that nothing waits for: where no task
        is queued and a GPU is free that no chain claims. Once running it keeps its GPU until a later run() of
        the chain with the same options takes it (its reply, or its job still running) or drop_speculations()
        cancels it. False: not started (the Slurm executor, no such GPU, queued tasks, or the same one already
        started)."""
        if self.spec.kind != LOCAL:
            return False  # Slurm's room is its queue's: no idle GPU is known there, and a guess costs a job
        with self.cond:
            claimed = len(self._live_claims())
            if self.closed or self.failure is not None or self.pending or self.backend.room() - claimed <= 0:
                return False
            if any(t.chain == chain and t.task.options == task.options for t in self._speculations):
                return False
            ticket = self._ticket(task, chain, None, announce=True)
            ticket.speculative = True
            self._speculations.append(ticket)
            self.pending.append(ticket)
            self.cond.notify_all()
            return True

    def drop_speculations(self, chain: str = "") -> None:
        """The chain's speculations given up: queued ones removed, running ones cancelled (their GPUs come back
        when their jobs end)."""
        with self.cond:
            dropped = [self._drop(t) for t in [t for t in self._speculations if t.chain == chain]]
            self.cond.notify_all()
        _cancel_jobs([d for d in dropped if d is not None])

    def chain_done(self, chain: str) -> None:
        """The chain asks for nothing more: its claim on a GPU (see CLAIM_S) ends now."""
        with self.cond:
            if self._claims.pop(chain, None) is not None:
                self.cond.notify_all()

    def _ticket(self, task: ProbeTask, chain: str, queued: Optional[Callable[[], None]], announce: bool) -> _Ticket:
        """A new ticket (lock held); announce: its job tells its suspect kernels in a file of the job folder."""
        self._seq += 1
        if announce:
            task = replace(task, announce=str(self.folder / f"suspect-{self.token[:12]}-{self._seq}.json"))
        return _Ticket(task, chain, self._seq, queued)

    def _adopt(self, task: ProbeTask, chain: str) -> tuple[Optional[_Ticket], list]:
        """(the chain's speculation with the task's options, or None; the running jobs of its other
        speculations, dropped here, to cancel once the lock is released). Lock held."""
        taken, dropped = None, []
        for t in [t for t in self._speculations if t.chain == chain]:
            if taken is None and t.task.options == task.options and t.error is None:
                taken = t
                self._speculations.remove(t)
                t.speculative = False
            else:
                dropped.append(self._drop(t))
        return taken, [d for d in dropped if d is not None]

    def _drop(self, ticket: _Ticket) -> Optional[tuple]:
        """A speculation given up (lock held): out of the queue, or its running (job, slot, ticket) to cancel."""
        ticket.dropped, ticket.speculative = True, False
        if ticket in self._speculations:
            self._speculations.remove(ticket)
        if ticket.times is not None:
            ticket.times.dropped = True
        if ticket in self.pending:
            self.pending.remove(ticket)
            return None
        return next((r for r in self.running if r[2] is ticket and not ticket.done.is_set()), None)

    def _hear(self, ticket: _Ticket) -> None:
        """A running job's new announcement, told to its caller (the dispatcher's thread, lock not held)."""
        if ticket.on_suspect is None or ticket.task.announce is None:
            return
        try:
            st = os.stat(ticket.task.announce)
        except OSError:
            return  # nothing announced yet
        if (st.st_mtime_ns, st.st_size) == ticket.heard_stamp:
            return  # read already: the dispatcher looks every poll, the job writes once a kernel
        ticket.heard_stamp = (st.st_mtime_ns, st.st_size)
        suspect = read_suspect(Path(ticket.task.announce))
        if suspect is None or suspect.count <= ticket.heard:
            return
        ticket.heard = suspect.count
        try:
            ticket.on_suspect(suspect.kernel)
        except Exception:  # noqa: BLE001 - a speculation that fails to start costs nothing but its head start
            log.debug("nsightwrap: the speculation on %s could not start", suspect.kernel, exc_info=True)

    # The dispatcher thread.
    def _loop(self) -> None:
        try:
            self._dispatch()
        except Exception as e:  # noqa: BLE001 - a bug or a backend's surprise: no caller may wait forever
            self._abandon(f"the probe engine stopped ({type(e).__name__}: {_last_line(str(e))}); the sweep "
                          "or walk cannot go on: run it again (without --executor to run its attempts here)")

    def _dispatch(self) -> None:
        while True:
            with self.cond:
                if self.closed:
                    return
                self._submit_some()
                watched = list(self.running)
            self._show()
            for job, slot, ticket in watched:
                if job.done():
                    self._collect(job, slot, ticket)
                else:
                    self._hear(ticket)
            self._show()
            with self.cond:
                if not self.closed:
                    self.cond.wait(self.spec.poll)

    def _abandon(self, reason: str) -> None:
        """The dispatcher died: every queued and running probe answered with `reason`, running jobs cancelled,
        and later probes refused with it."""
        with self.cond:
            self.failure = reason
            running, pending = self._take_all()
            for ticket in [t for _, _, t in running] + pending:
                self._answer(ticket, error=NsightwrapError(reason))
        _cancel_jobs(running)

    def _take_all(self) -> tuple[list, list]:
        """(running, pending), both emptied here, waiters woken (called with the lock held)."""
        running, self.running = self.running, []
        pending, self.pending = list(self.pending), deque()
        self._speculations, self._claims = [], {}
        self.cond.notify_all()
        return running, pending

    def _submit_some(self) -> None:
        """Pending tickets onto free room, the first by _first, the room a chain just answered would get
        before them kept for it (its claim, CLAIM_S) (called with the lock held)."""
        room = self.backend.room()
        if room == 0 or not self.pending:
            reason = self.backend.exhausted() if self.pending else None
            while reason and self.pending:
                self._answer(self.pending.popleft(), error=NsightwrapError(reason))
            return
        tickets = self._chosen(room)
        if not tickets:
            return
        for t in tickets:
            self.pending.remove(t)
            self.served[t.chain] = self.served.get(t.chain, 0) + 1
        try:
            jobs = self.backend.submit([t.task for t in tickets])
        except Exception as e:  # noqa: BLE001 - sbatch refused: every caller hears why
            for t in tickets:
                if t.speculative:  # nobody waits for it: the chain's run() submits its own
                    self._drop(t)
                else:
                    self._answer(t, error=NsightwrapError(f"the probe could not be submitted: {mask_text(str(e))}"))
            return
        now = time.time()
        for (job, slot), t in zip(jobs, tickets):
            t.times = JobTimes(t.chain, slot, now, speculative=t.speculative)  # its job's, the ticket's at a time
            self.timeline.append(t.times)
            self.running.append((job, slot, t))

    def _chosen(self, room: int) -> list[_Ticket]:
        """The pending tickets that get the room now: the first `room` by _first among them and the claims
        (a claimant asks as a new ticket of its chain would), the claimants' places left free."""
        entries: list[tuple[tuple, Optional[_Ticket]]] = [(self._first(t), t) for t in self.pending]
        entries += [((0, 1, self.served.get(c, 0), math.inf), None) for c in self._live_claims()]
        return [t for _, t in sorted(entries, key=lambda e: e[0])[:room] if t is not None]

    def _live_claims(self) -> dict[str, float]:
        """The claims not yet run out (lock held; the others forgotten)."""
        now = time.monotonic()
        self._claims = {c: until for c, until in self._claims.items() if until > now}
        return self._claims

    def _first(self, ticket: _Ticket) -> tuple[int, int, int, int]:
        """Which waiting ticket gets a GPU first: a retried probe, then the chain with the fewest jobs so far
        (least attained service: a chain just begun has the most left), then the oldest; a speculation last."""
        return (int(ticket.speculative), 0 if ticket.tries else 1, self.served.get(ticket.chain, 0), ticket.seq)

    def _collect(self, job: Any, slot: Optional[str], ticket: _Ticket) -> None:
        try:
            reply, failure = job.result(), None
        except Exception as e:  # noqa: BLE001 - the job failed (node failure, job error)
            reply, failure = None, f"job {job.job_id} failed: {_last_line(str(e))}"
        self._timed(ticket, reply)
        _forget_announcement(ticket)
        store_error = reply.get("store_error") if isinstance(reply, dict) else None
        left = reply["attempt"].gpu_left_after if reply is not None and not store_error else ()
        if left:
            failure = "the GPU still runs processes of the probe (" + ", ".join(left) + ")"
        with self.cond:  # every decision under the lock: run() may take a speculation, or drop it, meanwhile
            self.running = [r for r in self.running if r[0] is not job]
            if ticket.dropped or (ticket.speculative and (failure is not None or store_error)):
                self._end_speculation(job, slot, ticket, reply, failure)
            elif store_error:  # the store, not the GPU or node: nothing set aside
                self.backend.release(slot)
                self._answer(ticket, error=NsightwrapError(
                    f"the probe's job could not open the hang store on {reply['host']}: {store_error}; "
                    "give a store the nodes can reach (--store: a file on a shared file system, or a database "
                    "URL), or run without --executor"))
            elif failure is None:
                self.backend.release(slot)
                if not ticket.speculative:  # its chain's thread acts on the reply: it may ask again first
                    self._claims[ticket.chain] = time.monotonic() + self.claim_s
                self._answer(ticket, reply=reply)
            else:
                self._set_aside(job, slot, ticket, failure, reply)
            self.cond.notify_all()

    def _end_speculation(self, job: Any, slot: Optional[str], ticket: _Ticket, reply: Optional[dict],
                         failure: Optional[str]) -> None:
        """A dropped speculation's job ended, or a speculation's job failed before any run() took it (then the
        chain's run() starts a job of its own): nobody waits for it, it never runs again, nobody claims its GPU.
        The GPU comes back, unless the job left processes there or failed by itself (not by its cancel): then it
        is set aside, as any job's. Lock held."""
        by_itself = failure is not None and not ticket.dropped  # a cancelled job's failure is no fault
        kept = isinstance(reply, dict) and reply.get("attempt") is not None and reply["attempt"].gpu_left_after
        if ticket.speculative:
            self._drop(ticket)
        if kept or by_itself:
            self.backend.set_aside(slot, job, reply)
        else:
            self.backend.release(slot)

    def _timed(self, ticket: _Ticket, reply: Optional[dict]) -> None:
        """The ticket's job's timeline completed: seen now; the node's times; where it ran (Slurm: host:GPU)."""
        times = ticket.times
        if times is None:
            return
        times.seen = time.time()
        if isinstance(reply, dict):
            times.node = dict(reply.get("node_s") or {})
            if self.spec.kind != LOCAL and reply.get("host"):
                times.where = f"{reply['host']}:{reply.get('gpu') or '-'}"

    def _set_aside(self, job: Any, slot: Optional[str], ticket: _Ticket, failure: str, reply: Optional[dict]) -> None:
        """A failed job's GPU or node set aside, its probe queued again or, out of retries, failed (lock held).
        Never a speculation's (_end_speculation)."""
        where = self.backend.set_aside(slot, job, reply)
        ticket.failures.append(f"{failure} on {where}")
        ticket.tries += 1
        if ticket.tries > self.spec.retries:
            self._answer(ticket, error=NsightwrapError(
                f"the probe failed {ticket.tries} time(s), each set aside: {'; '.join(ticket.failures)}; "
                f"{self._logs()} and free or fix those GPUs/nodes"))
        else:
            ticket.heard, ticket.heard_stamp = 0, None  # its announcements start again (the failed job's file is gone)
            self.pending.appendleft(ticket)  # run again elsewhere, before the others
        self.cond.notify_all()

    def _logs(self) -> str:
        """Where the job logs are: a folder of this engine's own goes when it closes."""
        if self.owned:
            return ("the job logs go with this run's job folder when it ends: run again with --executor-folder "
                    "DIR to keep them")
        return f"see the job logs in {self.folder}"

    def _answer(self, ticket: _Ticket, reply: Optional[dict] = None, error: Optional[BaseException] = None) -> None:
        ticket.reply, ticket.error = reply, error
        self.finished += 1
        ticket.done.set()

    def _show(self) -> None:
        now = self.counts()
        if now != self._shown and self.on_counts is not None:
            self._shown = now
            self.on_counts(f"probes: {now[0]} queued, {now[1]} running, {now[2]} finished")

    def cancel(self) -> None:
        """Ctrl-C: every queued and running job cancelled; their callers hear KeyboardInterrupt."""
        with self.cond:
            self.closed = True
            running, pending = self._take_all()
        for ticket in [t for _, _, t in running] + pending:
            ticket.error = KeyboardInterrupt("interrupted: the engine's jobs were cancelled")
            ticket.done.set()
        self._stop_jobs(running)

    def _stop_jobs(self, running: list) -> None:
        """Each (job, slot, ticket)'s job cancelled, waited for (local jobs, bounded) and what it leaves stopped."""
        _cancel_jobs(running)
        _wait_local(running, self.cancel_wait_s)
        if self.spec.kind == LOCAL:
            self._stop_leftovers(running)

    def _stop_leftovers(self, running: list) -> None:
        """Cancelled local jobs still running after the wait (a process that ignores SIGINT: nsightwrap was
        started with it ignored, `nsightwrap ... &` in a script, and its jobs inherited that), and every process
        of this engine's probes (its token in their environment): stopped as a tree is, so none keeps a GPU."""
        controllers = [p.pid for p in (getattr(job, "_process", None) for job, _, _ in running)
                       if p is not None and p.poll() is None]

        def find() -> list[psutil.Process]:
            pids = set(controllers) | descendants_of(controllers)
            pids |= {p.pid for p, _ in processes_with(SWEEP_VAR, self.token, uid=os.getuid())}
            return [p for p in map(_process, pids) if p is not None and alive(p)]

        survivors = stop_processes(find, self.stop_policy)
        for p in (getattr(job, "_process", None) for job, _, _ in running):
            if p is not None:
                p.poll()  # reaped: no zombie left of a controller
        if survivors:
            log.warning("processes of the cancelled probes survived SIGKILL: %s; stop "
                        "them (kill -9) before using those GPUs again", ", ".join(survivors))

    def close(self) -> None:
        """The dispatcher stopped; a job still running (on a normal end only a dropped speculation's, cancelled
        already) waited for and stopped as cancel() does, before its folder goes."""
        with self.cond:
            self.closed = True
            running, self.running = self.running, []
            self.cond.notify_all()
        self.thread.join(timeout=5)
        if running:
            self._stop_jobs(running)
        for kept in self._kept:
            kept.forget()
        if self.owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "ProbeEngine":
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:
            self.cancel()
        self.close()


def _forget_announcement(ticket: _Ticket) -> None:
    """The ticket's announcement file (and its temporary twin) removed: its job has ended."""
    announce = getattr(ticket.task, "announce", None)
    if announce is not None:
        for path in (Path(announce), Path(announce + ".tmp")):
            path.unlink(missing_ok=True)


def _wait_local(running: list, limit_s: float = LOCAL_CANCEL_WAIT_S) -> None:
    """Cancelled local jobs: wait (bounded) until their processes have stopped their probes' trees."""
    until = time.monotonic() + limit_s
    for job, _, _ in running:
        process = getattr(job, "_process", None)
        if process is not None:
            try:
                process.wait(max(0.0, until - time.monotonic()))
            except Exception:  # noqa: BLE001 - still running after the limit: left to its own SIGKILL
                pass


def _process(pid: int) -> Optional[psutil.Process]:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return mask_text(lines[-1] if lines else text)


def local_gpus(jobs: int) -> list[str]:
    """The GPUs the local executor uses: the first `jobs` of them, or every GPU when jobs is 0."""
    count = gpu.gpu_count()
    if count is None:
        raise NsightwrapError("--executor local runs one probe per GPU, but the GPUs cannot be listed here "
                              "(nvidia-smi not found); run without --executor")
    want = count if jobs <= 0 else jobs
    if count == 0 or count < want:
        raise NsightwrapError(f"--executor local with --jobs {jobs} needs {max(1, want)} GPU(s), but {count} found; "
                              f"use --jobs {max(1, count)}")
    return [str(i) for i in range(want)]


def open_engine(spec: ExecutorSpec, jobs: int = 1, on_counts: Optional[Callable[[str], None]] = None) -> ProbeEngine:
    """The engine of `spec` (its job folder made here, 0700, removed at close unless given)."""
    owned = spec.folder is None
    if owned:
        base = None if spec.kind == LOCAL else jobs_dir()
        if base is not None:
            make_private_dirs(base)
        folder = Path(tempfile.mkdtemp(prefix="nsightwrap-jobs-", dir=base))
    else:
        folder = Path(spec.folder)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        backend = LocalBackend(folder, local_gpus(jobs)) if spec.kind == LOCAL else SlurmBackend(folder, spec)
    except BaseException as e:
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(e, ImportError):
            raise NsightwrapError("--executor needs submitit: pip install 'nsightwrap[cluster]' "
                                  "(or pip install submitit)") from None
        if isinstance(e, RuntimeError) and "srun" in str(e):
            raise NsightwrapError("--executor slurm needs Slurm's commands (srun, sbatch) on PATH here; "
                                  "run on a login node of the cluster") from None
        raise
    return ProbeEngine(spec, backend, folder, owned, on_counts)


def _cancel_jobs(running: list) -> None:
    """Cancel each (job, slot, ticket)'s job; one whose cancel fails (scancel) ends at its time limit."""
    for job, _, _ in running:
        try:
            job.cancel(check=False)
        except Exception:  # noqa: BLE001 - scancel failed: the job ends at its time limit
            pass

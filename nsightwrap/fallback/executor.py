"""Probes on a cluster engine (submitit): one job per probe, on the local GPUs or on Slurm.

A probe travels as a ProbeTask: a picklable description (command, options,
run config, the store setting, the GPU). On the node, run_probe runs it
through the normal attempt (Calibrator.run around profile_command: the same
code path as a probe of a local sweep), records it in the user's store, and
returns the probe's dict. The password of a store URL never travels in the
task: it waits in a 0600 file of the job folder (itself 0700), read back on
the node.

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

Local jobs: submitit's LocalExecutor pins each job to `visible_gpus[:gpus_per_node]`,
the same GPUs for every job of an executor, so the engine keeps one executor
per GPU and gives a job the executor of a free GPU: one probe per GPU.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.errors import NsightwrapError, ProfileInterrupted, StoreError
from nsightwrap.fallback.collectives import JobShape
from nsightwrap.fallback.session import SWEEP, Session, Tag
from nsightwrap.fallback.spec import LOCAL, ExecutorSpec
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import SWEEP_VAR
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.paths import jobs_dir, make_private_dirs
from nsightwrap.secrets import mask_text
from nsightwrap.status import ERROR, INTERRUPTED
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.watch import gpu

__all__ = ["EngineAttempts", "JobTimes", "ProbeEngine", "ProbeTask", "StoreSetting", "local_gpus", "open_engine",
           "run_probe", "store_setting_of"]

#: A local job's own time limit (submitit's default is 2 minutes): a probe is bounded by its watch instead.
LOCAL_JOB_MINUTES = 24 * 60

# --- the probe, on the node ------------------------------------------------------


@dataclass(frozen=True)
class StoreSetting:
    """A store path or URL without its password; the password in a 0600 file, when there is one.

    The password may be the URL's (``user:pw@host``) or its query's (``?password=pw``, as libpq takes it): both
    leave the public setting, and go back where they were on the node. The file's name is unique (several
    sweeps may share an --executor-folder); the engine that made it unlinks it when it closes."""

    public: str
    secret_file: Optional[str] = None

    @classmethod
    def keep(cls, setting: str, folder: Path) -> "StoreSetting":
        parts = urlsplit(setting) if "://" in setting else None
        if parts is None:
            return cls(setting)
        query = parse_qsl(parts.query, keep_blank_values=True)
        secrets = {"netloc": parts.password, "query": [v for k, v in query if k.lower() == "password"]}
        if secrets["netloc"] is None and not secrets["query"]:
            return cls(setting)
        secret = folder / f"store-password-{uuid.uuid4().hex}"
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(secrets, f)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        user = parts.username or ""
        public = parts._replace(netloc=f"{user}@{netloc}" if user else netloc,
                                query=urlencode([(k, v) for k, v in query if k.lower() != "password"]))
        return cls(urlunsplit(public), str(secret))

    def setting(self) -> str:
        """The full setting again (on the node, in memory only)."""
        if self.secret_file is None:
            return self.public
        secrets = json.loads(Path(self.secret_file).read_text())
        parts = urlsplit(self.public)
        if secrets["netloc"] is not None:
            user, host = parts.netloc.rsplit("@", 1) if "@" in parts.netloc else ("", parts.netloc)
            parts = parts._replace(netloc=f"{user}:{secrets['netloc']}@{host}")
        if secrets["query"]:
            query = parse_qsl(parts.query, keep_blank_values=True) + [("password", v) for v in secrets["query"]]
            parts = parts._replace(query=urlencode(query))
        return urlunsplit(parts)

    def forget(self) -> None:
        """The password file removed (the engine closes: no job reads it any more)."""
        if self.secret_file is not None:
            Path(self.secret_file).unlink(missing_ok=True)


def store_setting_of(store: HangStore) -> str:
    """What opens `store` again in another process: its URL (password included: StoreSetting.keep moves it
    into a 0600 file) where it is a database, else its file's path."""
    location = store.location
    return location.url if location.url is not None else str(location.path)


@dataclass(frozen=True)
class ProbeTask:
    """One probe, picklable: what run_probe needs on the node."""

    command: tuple[str, ...]
    options: ProfileOptions
    config: RunConfig  # with the calibration known when the task was made
    store: Optional[StoreSetting]
    shape: JobShape
    nsys: Optional[str] = None
    gpu: Optional[str] = None  # CUDA_VISIBLE_DEVICES of the probe (local jobs); None: the node's own
    ladder: str = SWEEP
    sweep: str = ""  # the sweep's token (SWEEP_VAR): its other probes on the node's GPUs are not foreign
    #: The machine as the sweep's store knows it, where the job runs on that machine (local jobs): the node
    #: need not ask nvidia-smi again. None: the node detects its own (Slurm).
    environment: Optional[Environment] = None
    kernel: Optional[str] = None  # a walk's: the kernel the attempt is for (None: the program), as Tag records it
    rung: Optional[str] = None  # a walk's: the rung's name


def run_probe(task: ProbeTask) -> dict:
    """On the node: the probe as a local sweep runs it, recorded in the store as Session.attempt records (the
    store leaves out an interrupted probe and a program fault); the probe's dict.

    The store opens beside the attempt's start (_Opening: opening it imports the database library, a few tenths
    of a second of every job). A probe whose GPU still runs processes afterwards is recorded all the same (as
    Session.attempt does before GpuKept); its reply's attempt says so (gpu_left_after) and the engine sets that
    GPU aside and runs the probe again elsewhere. A store that cannot be opened here is no fault of the GPU or
    node: the attempt is stopped at once, the reply's ``store_error`` says why (no attempt in it) and the engine
    fails the probe without setting anything aside.
    """
    began = time.time()
    own = {SWEEP_VAR: task.sweep} if task.sweep else {}
    if task.gpu is not None:
        own["CUDA_VISIBLE_DEVICES"] = task.gpu
    reply: dict[str, Any] = {"host": socket.gethostname(), "gpu": None, "node_s": {"began": began}}
    opening = _Opening(task.store)
    try:
        context = RunContext.create(task.config)
        context = context.replace(env={**context.env, **own})
        reply["gpu"] = context.env.get("CUDA_VISIBLE_DEVICES")
        attempt, recorded = _probe(task, context, opening, reply["node_s"])
    except StoreError as e:
        return {**reply, "status": ERROR, "recorded": False, "attempt": None, "store_error": mask_text(str(e))}
    finally:
        opening.close()
    reply["node_s"]["ended"] = time.time()
    return {**reply, "status": attempt.status, "recorded": recorded, "attempt": attempt}


def _probe(task: ProbeTask, context: RunContext, opening: "_Opening", times: dict) -> tuple[Any, bool]:
    """The probe's attempt, and whether the store kept a record of it; `times` gets the attempt's start and end
    (wall clock, seconds since the epoch: the engine sets them beside its own). StoreError: the store could not
    be opened (the attempt was stopped as soon as that was known)."""
    command = list(task.command)
    env = task.environment
    if env is None and task.store is not None:
        env = task.shape.environment(context)  # the node's own (Slurm), asked once
    calibrator = Calibrator(command, store=opening.get if task.store is not None else None, env=env, nsys=task.nsys)
    session = Session(command, context, calibrator=calibrator, environment=env)
    session.shape = task.shape  # as the sweep has learnt it
    times["attempt_start"] = time.time()
    try:
        what = f"rung {task.rung!r}" if task.rung else "the probe"  # as Session.attempt says it
        attempt = session.run(task.options, what=what, cancel=opening.failed)
    except ProfileInterrupted as e:
        opening.get()  # the store's error, when that was what stopped it
        return e.attempt, False
    finally:
        times["attempt_end"] = time.time()
    session.store = opening.get()
    return attempt, bool(session.record(attempt, task.options, Tag(task.kernel, task.rung, task.ladder)))


class _Opening:
    """The probe's store, opened in a thread of its own from the job's start; `failed` is set when it cannot be.
    (The store's SQLite connection may be used by another thread, one at a time: check_same_thread is off.)"""

    def __init__(self, setting: Optional[StoreSetting]) -> None:
        self.store: Optional[HangStore] = None
        self.error: Optional[StoreError] = None
        self.failed = threading.Event()
        self.thread = threading.Thread(target=self._open, args=(setting,), name="nsightwrap-store-open", daemon=True)
        self.thread.start()

    def _open(self, setting: Optional[StoreSetting]) -> None:
        if setting is None:
            return
        try:
            self.store = HangStore(setting.setting())
        except (StoreError, OSError) as e:  # OSError: the password file is gone (the engine closed)
            self.error = e if isinstance(e, StoreError) else StoreError(str(e))
            self.failed.set()

    def get(self) -> Optional[HangStore]:
        """The store once open (None: no store given); StoreError when it could not be opened."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.store

    def close(self) -> None:
        self.thread.join()
        if self.store is not None:
            self.store.close()


class EngineAttempts:
    """Session.attempt as jobs of an engine (the sweep's probes, the walk's attempts): the task made here (the
    calibration known here travels with it), run and recorded on the node by run_probe under the same Tag as
    Session.attempt records; the job's shape learnt here. A GPU that keeps processes is the engine's to set
    aside (the attempt runs again elsewhere), never a GpuKept."""

    def __init__(self, session: Session, engine: "ProbeEngine") -> None:
        self.session, self.engine = session, engine
        self.store = engine.keep_store(store_setting_of(session.store)) if session.store is not None else None

    def task(self, options: ProfileOptions, tag: Tag, context: Optional[RunContext] = None) -> ProbeTask:
        session, calibrator = self.session, self.session.calibrator
        environment = session.environment  # asked once, and handed to the calibrator before it looks
        config = calibrator.apply(context or session.context).config
        local = self.engine.spec.kind == LOCAL  # this machine: the node need not ask nvidia-smi again
        return ProbeTask(tuple(session.command), options, config, self.store, session.shape, nsys=calibrator.nsys,
                         ladder=tag.ladder or SWEEP, sweep=self.engine.token,
                         environment=environment if local else None, kernel=tag.kernel, rung=tag.rung)

    def attempt(self, options: ProfileOptions, tag: Tag, context: Optional[RunContext] = None,
                chain: str = "", queued: Optional[Callable[[], None]] = None) -> tuple[Any, Optional[str]]:
        """(the attempt, where it ran: the GPU, or host:GPU on Slurm); ProfileInterrupted when it was stopped."""
        reply = self.engine.run(self.task(options, tag, context), chain, queued)
        attempt = reply["attempt"]
        if attempt.status == INTERRUPTED:
            raise ProfileInterrupted(attempt)
        self.session.learn(attempt)
        where = reply["gpu"] if self.engine.spec.kind == LOCAL else f"{reply['host']}:{reply['gpu'] or '-'}"
        return attempt, where


# --- where jobs run ----------------------------------------------------------------


def _submitit() -> Any:
    """submitit, its log kept off stdout: it logs every message to stdout as well as warnings to stderr,
    and nsightwrap's stdout is the user's (--json)."""
    import submitit

    log = logging.getLogger("submitit")
    for handler in [h for h in log.handlers if h.name == "submitit_out"]:
        log.removeHandler(handler)
    return submitit


class _Local:
    """submitit's LocalExecutor, one per GPU (it pins a job to its executor's visible_gpus)."""

    def __init__(self, folder: Path, gpus: Sequence[str]) -> None:
        submitit = _submitit()

        self.free = list(gpus)
        self.aside: list[str] = []
        self.executors = {}
        for g in gpus:
            ex = submitit.LocalExecutor(folder=folder / f"gpu{g}")
            ex.update_parameters(gpus_per_node=1, visible_gpus=[int(g)], timeout_min=LOCAL_JOB_MINUTES)
            self.executors[g] = ex

    def room(self) -> int:
        return len(self.free)

    def submit(self, tasks: list[ProbeTask]) -> list[tuple[Any, Optional[str]]]:
        out = []
        for task in tasks:
            g = self.free.pop(0)
            job = self.executors[g].submit(run_probe, replace(task, gpu=g))
            job._results_timeout_s = 0  # a local job's result is there at once, or never (no shared file system)
            out.append((_LocalJob(job), g))
        return out

    def release(self, slot: Optional[str]) -> None:
        self.free.append(slot)

    def set_aside(self, slot: Optional[str], job: Any, reply: Optional[dict]) -> str:
        self.aside.append(slot)
        return f"GPU {slot}"

    def exhausted(self) -> Optional[str]:
        if self.free or not self.aside:
            return None
        return (f"every GPU was set aside (GPUs {', '.join(self.aside)}: a failed job or processes left on it); "
                "free the GPUs (nvidia-smi) and run again")


class _LocalJob:
    """A local submitit job, done once its result file is there (submitit writes it whole: a temporary file
    renamed). The job's process takes tenths of a second more to exit (it imported the store's database
    library), and the probe's tree has ended before the result is written, so its GPU is free again."""

    def __init__(self, job: Any) -> None:
        self.job = job
        self.job_id = job.job_id

    @property
    def _process(self) -> Any:  # for _wait_local
        return getattr(self.job, "_process", None)

    def done(self) -> bool:
        return self.job.paths.result_pickle.exists() or self.job.done()

    def result(self) -> Any:
        if self.job.paths.result_pickle.exists():
            outcome, value = self.job._get_outcome_and_result()  # submitit's reader, without waiting for the exit
            if outcome == "success":
                return value
        return self.job.result()  # the job's error, raised by submitit once its process has ended

    def cancel(self, check: bool = True) -> None:
        self.job.cancel(check=check)


class _Slurm:
    """submitit's SlurmExecutor: the tasks of one round as one job array, one GPU each, bad nodes excluded."""

    def __init__(self, folder: Path, spec: ExecutorSpec) -> None:
        submitit = _submitit()

        self.executor = submitit.SlurmExecutor(folder=folder)
        params: dict[str, Any] = {"gpus_per_node": 1, "ntasks_per_node": 1, "nodes": 1}
        for key, value in (("partition", spec.partition), ("account", spec.account), ("time", spec.time)):
            if value is not None:
                params[key] = value
        if spec.options:
            params["additional_parameters"] = dict(spec.options)
        self.executor.update_parameters(**params)
        self.excluded: list[str] = []

    def room(self) -> int:
        return 1 << 30  # Slurm queues them

    def submit(self, tasks: list[ProbeTask]) -> list[tuple[Any, Optional[str]]]:
        if self.excluded:
            self.executor.update_parameters(exclude=",".join(sorted(self.excluded)))
        with self.executor.batch():
            jobs = [self.executor.submit(run_probe, task) for task in tasks]
        return [(job, None) for job in jobs]

    def release(self, slot: Optional[str]) -> None:
        pass

    def set_aside(self, slot: Optional[str], job: Any, reply: Optional[dict]) -> str:
        node = reply["host"] if reply else _node_of(job)
        if node and node not in self.excluded:
            self.excluded.append(node)
        return f"node {node}" if node else "its node (unknown)"

    def exhausted(self) -> Optional[str]:
        return None


def _node_of(job: Any) -> Optional[str]:
    try:
        node = job.get_info(mode="force").get("NodeList")
    except Exception:  # noqa: BLE001 - sacct may fail; the node is then unknown
        return None
    return node if node and node not in ("None assigned", "(null)") else None


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
        self._times: dict[int, JobTimes] = {}  # id(job) -> its entry
        self._seq = 0
        self.cond = threading.Condition()
        self.closed = False
        self.failure: Optional[str] = None  # why the dispatcher stopped, if it died
        self._shown = (0, 0, 0)
        self._kept: list[StoreSetting] = []  # their password files, unlinked at close
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

    def run(self, task: ProbeTask, chain: str = "", queued: Optional[Callable[[], None]] = None) -> dict:
        """The probe's reply, once its job is done. chain: what the task belongs to (see the module docstring);
        queued: called once the task waits in the queue (a caller that starts a chain waits for that)."""
        with self.cond:
            if self.failure is not None:
                raise NsightwrapError(self.failure)
            if self.closed:
                raise KeyboardInterrupt("the sweep was interrupted")
            self._seq += 1
            ticket = _Ticket(task, chain, self._seq, queued)
            self.pending.append(ticket)
            self.cond.notify_all()
        if queued is not None:
            queued()
        while not ticket.done.wait(0.5):  # short waits: Ctrl-C reaches the main thread between them
            pass
        if ticket.error is not None:
            raise ticket.error
        assert ticket.reply is not None
        return ticket.reply

    # The dispatcher thread.
    def _loop(self) -> None:
        try:
            self._dispatch()
        except Exception as e:  # noqa: BLE001 - a bug or a backend's surprise: no caller may wait forever
            self._abandon(f"the probe engine stopped ({type(e).__name__}: {_last_line(str(e))}); the sweep "
                          "cannot go on: run it again (without --executor to run the probes here)")

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
            self._show()
            with self.cond:
                if not self.closed:
                    self.cond.wait(self.spec.poll)

    def _abandon(self, reason: str) -> None:
        """The dispatcher died: every queued and running probe answered with `reason`, running jobs cancelled,
        and later probes refused with it."""
        with self.cond:
            self.failure = reason
            running, self.running = self.running, []
            pending, self.pending = list(self.pending), deque()
            for ticket in [t for _, _, t in running] + pending:
                self._answer(ticket, error=NsightwrapError(reason))
            self.cond.notify_all()
        for job, _, _ in running:
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 - scancel failed: the job ends at its time limit
                pass

    def _submit_some(self) -> None:
        """Pending tickets onto free room, the first by _first (called with the lock held)."""
        n = min(len(self.pending), self.backend.room())
        if n == 0:
            reason = self.backend.exhausted() if self.pending else None
            while reason and self.pending:
                self._answer(self.pending.popleft(), error=NsightwrapError(reason))
            return
        tickets = sorted(self.pending, key=self._first)[:n]
        for t in tickets:
            self.pending.remove(t)
            self.served[t.chain] = self.served.get(t.chain, 0) + 1
        try:
            jobs = self.backend.submit([t.task for t in tickets])
        except Exception as e:  # noqa: BLE001 - sbatch refused: every caller hears why
            for t in tickets:
                self._answer(t, error=NsightwrapError(f"the probe could not be submitted: {mask_text(str(e))}"))
            return
        now = time.time()
        for (job, slot), t in zip(jobs, tickets):
            self._times[id(job)] = times = JobTimes(t.chain, slot, now)
            self.timeline.append(times)
            self.running.append((job, slot, t))

    def _first(self, ticket: _Ticket) -> tuple[int, int, int]:
        """Which waiting ticket gets a GPU first: a retried probe, then the chain with the fewest jobs so far
        (least attained service: a chain just begun has the most left), then the oldest."""
        return (0 if ticket.tries else 1, self.served.get(ticket.chain, 0), ticket.seq)

    def _collect(self, job: Any, slot: Optional[str], ticket: _Ticket) -> None:
        try:
            reply, failure = job.result(), None
        except Exception as e:  # noqa: BLE001 - the job failed (node failure, job error)
            reply, failure = None, f"job {job.job_id} failed: {_last_line(str(e))}"
        self._timed(job, reply)
        if reply is not None and reply.get("store_error"):  # the store, not the GPU or node: nothing set aside
            with self.cond:
                self.running = [r for r in self.running if r[0] is not job]
                self.backend.release(slot)
                self._answer(ticket, error=NsightwrapError(
                    f"the probe's job could not open the hang store on {reply['host']}: {reply['store_error']}; "
                    "give a store the nodes can reach (--store: a file on a shared file system, or a database "
                    "URL), or run without --executor"))
                self.cond.notify_all()
            return
        if reply is not None and reply["attempt"].gpu_left_after:
            failure = "the GPU still runs processes of the probe (" + ", ".join(reply["attempt"].gpu_left_after) + ")"
        with self.cond:
            self.running = [r for r in self.running if r[0] is not job]
            if failure is None:
                self.backend.release(slot)
                self._answer(ticket, reply=reply)
                return
            self._set_aside(job, slot, ticket, failure, reply)

    def _timed(self, job: Any, reply: Optional[dict]) -> None:
        """The job's timeline completed: seen now; the node's times; where it ran (Slurm: host:GPU)."""
        times = self._times.pop(id(job), None)
        if times is None:
            return
        times.seen = time.time()
        if isinstance(reply, dict):
            times.node = dict(reply.get("node_s") or {})
            if self.spec.kind != LOCAL and reply.get("host"):
                times.where = f"{reply['host']}:{reply.get('gpu') or '-'}"

    def _set_aside(self, job: Any, slot: Optional[str], ticket: _Ticket, failure: str, reply: Optional[dict]) -> None:
        """A failed job's GPU or node set aside, its probe queued again or, out of retries, failed (lock held)."""
        where = self.backend.set_aside(slot, job, reply)
        ticket.failures.append(f"{failure} on {where}")
        ticket.tries += 1
        if ticket.tries > self.spec.retries:
            self._answer(ticket, error=NsightwrapError(
                f"the probe failed {ticket.tries} time(s), each set aside: {'; '.join(ticket.failures)}; "
                f"{self._logs()} and free or fix those GPUs/nodes"))
        else:
            self.pending.appendleft(ticket)  # run again elsewhere, before the others
        self.cond.notify_all()

    def _logs(self) -> str:
        """Where the job logs are: a folder of this engine's own goes when it closes."""
        if self.owned:
            return ("the job logs go with this sweep's job folder when it ends: run again with --executor-folder "
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
            running, self.running = self.running, []
            pending, self.pending = list(self.pending), deque()
            self.cond.notify_all()
        for job, _, ticket in running:
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 - scancel failed: the job ends at its time limit
                pass
            ticket.error = KeyboardInterrupt("the sweep was interrupted")
            ticket.done.set()
        for ticket in pending:
            ticket.error = KeyboardInterrupt("the sweep was interrupted")
            ticket.done.set()
        _wait_local(running)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join(timeout=5)
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


def _wait_local(running: list, limit_s: float = 10.0) -> None:
    """Cancelled local jobs: wait (bounded) until their processes have stopped their probes' trees."""
    until = time.monotonic() + limit_s
    for job, _, _ in running:
        process = getattr(job, "_process", None)
        if process is not None:
            try:
                process.wait(max(0.0, until - time.monotonic()))
            except Exception:  # noqa: BLE001 - still running after the limit: left to its own SIGKILL
                pass


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
        backend = _Local(folder, local_gpus(jobs)) if spec.kind == LOCAL else _Slurm(folder, spec)
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

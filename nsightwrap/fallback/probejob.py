"""A probe as a job: its picklable task (ProbeTask), what runs it on the node (run_probe), and where jobs run
(submitit's local and Slurm executors). The engine that dispatches them is nsightwrap.fallback.executor.

A probe travels as a ProbeTask: a picklable description (command, options,
run config, the store setting, the GPU). On the node, run_probe runs it
through the normal attempt (Calibrator.run around profile_command: the same
code path as a probe of a local sweep, or an attempt of a walk), records it
in the user's store, and returns the probe's dict. The password of a store
URL never travels in the task: it waits in a 0600 file of the job folder
(itself 0700), read back on the node.

Local jobs: submitit's LocalExecutor pins each job to `visible_gpus[:gpus_per_node]`,
the same GPUs for every job of an executor, so the engine keeps one executor
per GPU and gives a job the executor of a free GPU: one probe per GPU.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psutil

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.errors import ProfileInterrupted, StoreError
from nsightwrap.fallback.announce import StallAnnouncer
from nsightwrap.fallback.collectives import JobShape
from nsightwrap.fallback.session import SWEEP, Session, Tag
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import SWEEP_VAR
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.secrets import mask_text
from nsightwrap.status import ERROR
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.watch.signals import hear_interrupts
from nsightwrap.watch.tree import ignores

__all__ = ["LocalBackend", "ProbeTask", "SlurmBackend", "StoreSetting", "run_probe", "run_probe_job",
           "store_setting_of"]

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
    #: Where the node announces a kernel it suspects while the attempt runs (a whole-program run of a sweep:
    #: nsightwrap.fallback.announce); None: nothing announced.
    announce: Optional[str] = None


def run_probe(task: ProbeTask) -> dict:
    """On the node: the probe as a local sweep runs it, recorded in the store as Session.attempt records (the
    store leaves out an interrupted probe and a program fault); the probe's dict.

    The store opens beside the attempt's start (_Opening: opening it imports the database library, a few tenths
    of a second of every job). A probe whose GPU still runs processes afterwards is recorded all the same (as
    Session.attempt does before GpuKept); its reply's attempt says so (gpu_left_after) and the engine sets that
    GPU aside and runs the probe again elsewhere. A store that cannot be opened here is no fault of the GPU or
    node: the attempt is stopped at once, the reply's ``store_error`` says why (no attempt in it) and the engine
    fails the probe without setting anything aside.

    A local job of an nsightwrap started with SIGINT ignored inherits SIG_IGN (submitit starts it): it hears
    SIGINT again first thing, so the engine's cancel stops its probe (the store leaves it out).
    """
    hear_interrupts()
    began = time.time()
    own = {SWEEP_VAR: task.sweep} if task.sweep else {}
    if task.gpu is not None:
        own["CUDA_VISIBLE_DEVICES"] = task.gpu
    reply: dict[str, Any] = {"host": socket.gethostname(), "gpu": None, "node_s": {"began": began}}
    opening = _Opening(task.store)
    try:
        context = RunContext.create(task.config)
        context = context.replace(env={**context.env, **own})
        if task.announce is not None:
            context = context.with_listener(StallAnnouncer(Path(task.announce)))
        reply["gpu"] = context.env.get("CUDA_VISIBLE_DEVICES")
        attempt, recorded = _probe(task, context, opening, reply["node_s"])
    except StoreError as e:
        return {**reply, "status": ERROR, "recorded": False, "attempt": None, "store_error": mask_text(str(e))}
    finally:
        opening.close()
    reply["node_s"]["ended"] = time.time()
    return {**reply, "status": attempt.status, "recorded": recorded, "attempt": attempt}


def run_probe_job(task: ProbeTask) -> dict:
    """run_probe as a job's process runs it (what the backends submit): the process's objects frozen (gc.freeze)
    once the probe is done, whatever its outcome. The process exits right after submitit has written the reply,
    and the interpreter's last garbage collections then skip everything the job imported and made (submitit,
    numpy, which submitit loads, the store's database library): ~0.2 s of CPU less a job (a job and its local
    controller were ~0.9 s). Only in a process about to exit: what is frozen is never collected. Unlike the
    command line's quick_exit, no collection first (it cost half the gain): nothing here waits on one, run_probe
    closes the store itself and the reply is written after the freeze."""
    try:
        return run_probe(task)
    finally:
        gc.freeze()


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


# --- where jobs run ----------------------------------------------------------------


def _submitit() -> Any:
    """submitit, its log kept off stdout: it logs every message to stdout as well as warnings to stderr,
    and nsightwrap's stdout is the user's (--json)."""
    import submitit

    log = logging.getLogger("submitit")
    for handler in [h for h in log.handlers if h.name == "submitit_out"]:
        log.removeHandler(handler)
    return submitit


class LocalBackend:
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
            job = self.executors[g].submit(run_probe_job, replace(task, gpu=g))
            job._results_timeout_s = 0  # a local job's result is there at once, or never (no shared file system)
            out.append((_LocalJob(job), g))
        return out

    def release(self, slot: Optional[str]) -> None:
        self.free.append(slot)

    def set_aside(self, slot: Optional[str], job: Any, reply: Optional[dict]) -> str:
        self.aside.append(slot)
        return f"GPU {slot}"

    def exhausted(self) -> Optional[str]:
        """Why no job can ever run here again: every GPU set aside (not merely busy: a GPU running a job comes
        back when it ends)."""
        if len(self.aside) < len(self.executors):
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
        read = getattr(self.job, "_get_outcome_and_result", None)  # submitit 1.5's reader (private: may go)
        if read is not None and self.job.paths.result_pickle.exists():
            outcome, value = read()  # without waiting for the job's process to exit
            if outcome == "success":
                return value
        return self.job.result()  # the job's error, raised by submitit once its process has ended

    def cancel(self, check: bool = True) -> None:
        """SIGINT to the job's controller (submitit's cancel), which passes it on to the job's process; to that
        process from here where the controller ignores SIGINT (it inherited SIG_IGN from nsightwrap)."""
        self.job.cancel(check=check)
        process = self._process
        if process is None or process.poll() is not None or not ignores(process.pid, signal.SIGINT):
            return
        try:
            tasks = psutil.Process(process.pid).children()
        except psutil.Error:
            return
        for task in tasks:
            try:
                task.send_signal(signal.SIGINT)
            except psutil.Error:
                pass


class SlurmBackend:
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
            jobs = [self.executor.submit(run_probe_job, task) for task in tasks]
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

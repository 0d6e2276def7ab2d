"""`hangs bundle KERNEL -o FILE` / :func:`hang_bundle`: one archive about a hanging kernel that someone else
(a teammate, NVIDIA's bug tracker) can act on with nothing else.

It gathers, for the kernel (and kernels of the same pattern): the store's records and the exact commands,
the debug log, the calibrations behind the verdicts, the smallest hanging section set a sweep found,
triage results when the store has them, each run's folder (watch.evidence: ncu's log, a timestamped
transcript, and at a stall ``nvidia-smi -q`` and the host stacks), the versions (cli.versions) and the
relevant environment variables. Every file is text and passes through nsightwrap.secrets on its way
in; README.md inside says what each file is and what was kept.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from nsightwrap.cli.versions import collect_versions
from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.secrets import MASK, is_secret_name, mask_doc, mask_text
from nsightwrap.status import HANG_OUTCOMES, USAGE_EXIT_CODE
from nsightwrap.store.debuglog import debug_log
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import StoreLocation, resolve_store
from nsightwrap.store.schema import CALIBRATION_COLUMNS, Record
from nsightwrap.store.triage import triage_rows
from nsightwrap.watch.evidence import StallEvidence

__all__ = ["Bundle", "KEPT_PREFIXES", "hang_bundle"]

#: Environment variables kept (values masked as secrets.py says): those that change how CUDA, the profilers,
#: Python and the job behave. Anything else (HOME, SSH_*, a shell's own) is left out.
KEPT_PREFIXES = ("CUDA", "NV", "NSIGHT", "NCU", "NSYS", "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHON",
                "TORCH", "PYTORCH", "NCCL", "OMP_", "MKL_", "TRITON", "XLA_", "TF_", "JAX_", "HF_", "SLURM_",
                "OMPI_", "PMI_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_")
_NO_RECORDS = ("no records of {} (nor of kernels like it, {}) in {}: see `nsightwrap hangs list` (`run --profile` "
               "and `sweep-sections` record; a plain `run` does not)")
#: The most kept of one file (bytes): its head and tail, the middle said.
FILE_LIMIT = 8 << 20


@dataclass(frozen=True)
class Bundle:
    """What :func:`hang_bundle` wrote."""

    path: Optional[Path]
    kernel: str
    records: int
    files: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    runs_missing: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def status(self) -> str:
        return "error" if self.error else "ok"

    @property
    def exit_code(self) -> int:
        return USAGE_EXIT_CODE if self.error else 0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "exit_code": self.exit_code, "path": str(self.path) if self.path else None,
                "kernel": self.kernel, "records": self.records, "files": self.files, "runs": self.runs,
                "runs_missing": self.runs_missing, **({"error": self.error} if self.error else {})}


class _Files:
    """The archive's files, in order, each masked on its way in, with what it is (the README's index)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str]] = []

    def add(self, name: str, text: str, what: str) -> None:
        data = text if len(text) <= FILE_LIMIT else (text[: FILE_LIMIT // 2] + f"\n[... {len(text) - FILE_LIMIT}"
                                                     " characters left out ...]\n" + text[-FILE_LIMIT // 2:])
        self.items.append((name, mask_text(data), what))

    def add_json(self, name: str, doc: Any, what: str) -> None:
        self.add(name, json.dumps(mask_doc(doc), indent=1, default=str) + "\n", what)

    @property
    def names(self) -> list[str]:
        return [n for n, _, _ in self.items]


def _environment(env: Mapping[str, str]) -> str:
    lines = []
    for name in sorted(env):
        if name.upper().startswith(KEPT_PREFIXES):
            value = MASK if is_secret_name(name) else env[name]
            lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def _commands(records: Sequence[Record]) -> str:
    lines = ["#!/bin/sh", "# The commands nsightwrap ran for this kernel, oldest first, one per run (secret values"
             " masked as ***: put yours back).", ""]
    seen = set()
    for r in sorted(records, key=lambda r: r.id):
        if (r.run_id or r.id) in seen or not r.command:
            continue
        seen.add(r.run_id or r.id)
        where = "".join(f", {what} {value}" for what, value in (("ladder", r.ladder), ("rung", r.rung)) if value)
        lines += [f"# {r.time} run {r.run_id}: {r.kernel} {r.outcome} with {r.profile_key.describe()}{where}",
                  shlex.join(r.command), ""]
    return "\n".join(lines)


def _calibrations(store: HangStore, records: Sequence[Record], pattern: str) -> list[dict]:
    """Calibration rows of the programs these records ran (their command ends with the subject) or of the kernel."""
    rows = [dict(zip(CALIBRATION_COLUMNS, r)) for r in store.calibration_table()]
    commands = {tuple(r.command) for r in records}

    def ours(row: dict) -> bool:
        try:
            subject = tuple(json.loads(row["subject"]))
        except (TypeError, ValueError):
            subject = ()
        ran = bool(subject) and any(c[-len(subject):] == subject for c in commands)
        return ran or (row["kernel"] != "*" and normalize_kernel(row["kernel"]) == pattern)
    return [r for r in rows if ours(r)]


def _sweep(records: Sequence[Record]) -> dict:
    """The sweep's hanging section sets, smallest first (the smallest known is the first)."""
    hung = [r for r in records if r.ladder == "sweep-sections" and r.outcome in HANG_OUTCOMES and r.trusted]
    sets = sorted({(r.kernel, r.sections, r.metrics, r.replay_mode) for r in hung},
                  key=lambda s: (len(s[1]) + len(s[2]), s))
    found = [{"kernel": k, "sections": list(s), "metrics": list(m), "replay_mode": mode} for k, s, m, mode in sets]
    return {"smallest": found[0] if found else None, "hanging_sets": found,
            "note": "" if found else "no sweep-sections records of a hang of this kernel: run `nsightwrap "
                                     "sweep-sections --kernel K -- PROGRAM` to find the smallest hanging set"}


def _triage(store: HangStore, kernel: str) -> Optional[dict]:
    """Every triage that named the kernel (all its runs, the working ones too), as `nsightwrap triage` stored it."""
    rows = [r.to_dict() for r in triage_rows(store, kernel=kernel)]
    return {"triage_runs": rows} if rows else None


#: A run's id as nsightwrap makes it (the run's cookie, uuid4().hex): anything else (``../..``) names no run folder.
_RUN_ID = re.compile(r"[0-9a-f]{8,64}")


def _run_files(files: _Files, runs_folder: Optional[Path], run_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """The run folders of `run_ids` into the bundle; an id that is not a plain cookie (a store row written by
    hand, ``../..``) is never joined to a path: it counts as missing."""
    found, missing = [], []
    for run_id in run_ids:
        folder = runs_folder / run_id if runs_folder and _RUN_ID.fullmatch(run_id) else None
        if folder is None or not folder.is_dir():
            missing.append(run_id)
            continue
        found.append(run_id)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            files.add(f"runs/{run_id}/{rel}", path.read_text(encoding="utf-8", errors="replace"), _what(rel))
    return found, missing


def _what(rel: str) -> str:
    if rel == "ncu.log":
        return "ncu's own log of the run (--log-file), as ncu wrote it"
    if rel == "transcript.log":
        return "everything the run printed, each line with its UTC time, seconds since the start, and channel"
    if rel.endswith("nvidia-smi-q.txt"):
        return "`nvidia-smi -q`, taken at the stall, before the tree was stopped"
    if rel.endswith("processes.json"):
        return "the stuck processes at the stall (state, kernel wait channel, command line) and the tools run"
    if re.search(r"stack-\d+\.txt$", rel):
        return "host stacks of one stuck process at the stall (py-spy dump, gdb or eu-stack)"
    return "a file of the run's folder"


def _readme(kernel: str, files: _Files, runs: Sequence[str], missing: Sequence[str],
            store: Union[Path, StoreLocation]) -> str:
    lines = [f"# nsightwrap hang bundle: {kernel}", "",
             f"Made {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by nsightwrap from the hang store "
             f"{store}, for the kernel `{kernel}` and kernels of its pattern `{normalize_kernel(kernel)}`.",
             "Start with debug-log.md (the attempts, what differed, what to try next), then commands.sh.", "",
             "## Files", ""]
    lines += [f"- `{name}`: {what}" for name, _, what in files.items] + ["- `README.md`: this file", ""]
    if missing:
        lines += [f"Runs without a folder (made before run evidence was kept, elsewhere, or dropped as old): "
                  f"{', '.join(missing)}.", ""]
    lines += ["## What is kept, and what is not", "",
              "- Secret values are replaced by `***` in every file: `--token=`, `--password X`, `*_TOKEN=`, "
              "`*_KEY=`, names holding `SECRET`, URL passwords (`postgresql://u:***@h/db`), `Authorization:` "
              "credentials and secret-looking headers (nsightwrap/secrets.py). A secret written in another form "
              "(a bare word in a log, a short option such as `-p X`) is not recognised: read the files before "
              "you send them.",
              "- environment.txt keeps only variables that change how CUDA, the profilers, Python and the job "
              f"behave (names starting with {', '.join(KEPT_PREFIXES)}); HOME, SSH_* and the rest are left out.",
              "- Host stacks and `nvidia-smi -q` are kept as the tools printed them (masked as above): they name "
              "this host's paths, process ids and GPU serial numbers.",
              "- The `.ncu-rep` reports are not included: they are ncu's binary files, which hold the program's "
              "command line unmasked. Attach them yourself if you want to.",
              "- Host name, GPU, driver and versions are kept: they are what makes the report actionable.", ""]
    return "\n".join(lines)


def _gather(files: _Files, store: HangStore, kernel: str, env: Mapping[str, str],
            versions: Callable[[Mapping[str, str]], dict]) -> list[Record]:
    records = list(reversed(store.records(pattern=kernel)))
    files.add_json("records.json", [r.to_dict() for r in records],
                   "every record of the kernel in the hang store: outcome, settings, silence and allowance, GPU, "
                   "driver, ncu version, run id")
    files.add("commands.sh", _commands(records), "the exact ncu command of each run, oldest first")
    files.add("debug-log.md", debug_log(store, kernel),
              "the debug log: each attempt (hypothesis, what was done, result, conclusion), key differences, "
              "what to try next")
    files.add_json("calibrations.json", _calibrations(store, records, normalize_kernel(kernel)),
                   "calibration evidence: how long the program and its kernels ran without ncu, and how measured")
    files.add_json("sweep.json", _sweep(records), "the smallest hanging section set known (sweep-sections)")
    triage = _triage(store, kernel)
    if triage is not None:
        files.add_json("triage.json", triage, "triage results of the kernel (nsightwrap triage)")
    files.add_json("versions.json", versions(env),
                   "versions: GPUs, driver, CUDA, ncu, nsys, compute-sanitizer, OS, Python and its packages, "
                   "doctor's checks")
    files.add("environment.txt", _environment(env), "the environment variables that matter here (see below)")
    return records


def _write(files: _Files, output: Path) -> None:
    """Written beside `output`, then moved into place: a failure leaves no half archive."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        if output.name.endswith(".zip"):
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                for name, text, _ in files.items:
                    z.writestr(f"{_top(output)}/{name}", text)
        else:
            with tarfile.open(tmp, "w:gz") as tar:
                for name, text, _ in files.items:
                    data = text.encode("utf-8", "replace")
                    info = tarfile.TarInfo(f"{_top(output)}/{name}")
                    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
                    tar.addfile(info, io.BytesIO(data))
        os.chmod(tmp, 0o600)  # host names, command lines: this user's
        os.replace(tmp, output)
    finally:
        if tmp.exists():
            tmp.unlink()


def _top(output: Path) -> str:
    name = output.name
    for suffix in (".tar.gz", ".tgz", ".zip"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or "bundle"
    return name


def hang_bundle(kernel: str, output: Union[str, os.PathLike], *,
                store: Union[str, os.PathLike, StoreLocation, None] = None,
                runs_folder: Union[str, os.PathLike, None] = None, env: Optional[Mapping[str, str]] = None,
                versions: Callable[[Mapping[str, str]], dict] = collect_versions) -> Bundle:
    """Write the bundle of `kernel` to `output` (``.tar.gz``, ``.tgz`` or ``.zip``); see the module.

    store: the hang store (default as every command: $NSIGHTWRAP_STORE, the XDG cache); runs_folder: where
    runs kept their folders (default: StallEvidence.default's, $NSIGHTWRAP_EVIDENCE). A kernel without
    records, or an output that exists, is an error (the Bundle says what to do); nothing is written then.
    """
    env = dict(os.environ if env is None else env)
    location, output = resolve_store(store, env), Path(output)
    path = location.path or location  # a file, or a team's database (its URL masked when printed)
    if output.exists() or output.is_symlink():
        return Bundle(None, kernel, 0, error=f"{output} exists: choose another file with -o, or remove it")
    if location.path is not None and not os.path.lexists(location.path):
        return Bundle(None, kernel, 0, error=f"no hang store at {path}: nothing recorded yet (--store PATH?). "
                                             "`run --profile` and `sweep-sections` record; a plain `run` does not")
    if runs_folder is None:
        default = StallEvidence.default({k: v for k, v in env.items() if k != "NSIGHTWRAP_EVIDENCE" or v != "off"})
        runs_folder = default.folder if default else None
    files = _Files()
    with HangStore(path, readonly=True) as s:
        records = _gather(files, s, kernel, env, versions)
        if not records:
            return Bundle(None, kernel, 0, error=_NO_RECORDS.format(kernel, normalize_kernel(kernel), path))
    run_ids = list(dict.fromkeys(r.run_id for r in records if r.run_id))
    runs, missing = _run_files(files, Path(runs_folder) if runs_folder else None, run_ids)
    files.items.insert(0, ("README.md", mask_text(_readme(kernel, files, runs, missing, path)), "this file"))
    try:
        _write(files, output)
    except OSError as e:
        raise NsightwrapError(f"cannot write the bundle {output} ({e}): choose a writable place with -o") from e
    return Bundle(output, kernel, len(records), files.names, runs, missing)

"""The rows a record or a watched attempt adds to the store, as dicts by Record field (no id yet).

Each row gets a ``uid`` (a UUID made here, by the writer) that names it in every store it is copied to:
a write retried after a lost connection, or an import of records a store already has, adds nothing.
"""

from __future__ import annotations

import getpass
import json
import uuid
from typing import TYPE_CHECKING, Any, Optional

from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.secrets import mask_text
from nsightwrap.status import ERROR, HANG, INTERRUPTED, OK, OUTCOMES, RANGE_MODES, ReplayMode
from nsightwrap.store.keys import Environment, as_key
from nsightwrap.store.schema import COLUMNS, Record, command_json

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt

__all__ = ["attempt_rows", "copied_row", "record_row", "this_user"]


def this_user() -> Optional[str]:
    """Who records (the login name), or None when it cannot be told."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):  # no $USER and no passwd entry (a container's anonymous uid)
        return None


def copied_row(r: Record) -> dict[str, Any]:
    """The row of a record copied from another store (``hangs import``): the same uid, so it is kept once."""
    d = {c: getattr(r, c) for c in COLUMNS if c != "id"}
    d.update(sections=json.dumps(list(r.sections)), metrics=json.dumps(list(r.metrics)),
             command=command_json(r.command), trusted=1 if r.trusted else 0, note=mask_text(r.note or ""),
             uid=r.uid or uuid.uuid4().hex)
    return d


def record_row(kernel: str, key: Any, outcome: str, env: Environment, *, passes, stall_s, elapsed_s, command,
               trusted, rung, ladder, note, time: str, user: Optional[str], run_id=None, allowance_s=None,
               basis=None, uid: Optional[str] = None) -> dict[str, Any]:
    """One record's row; ValueError/TypeError for arguments that make no record."""
    if not isinstance(kernel, str) or not kernel.strip():
        raise ValueError(f"kernel={kernel!r} must be a non-empty string (use '*' for unknown)")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r}; use one of {', '.join(OUTCOMES)}")
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment (Environment.detect()), not {type(env).__name__}")
    command = command_json(command)  # refuses a string command (TypeError)
    key = as_key(key)
    kernel = kernel.strip()
    return {
        "time": time, "host": env.host, "gpu": env.gpu, "driver": env.driver,
        "ncu_version": env.ncu_version, "kernel": kernel, "kernel_pattern": normalize_kernel(kernel),
        "set": key.set, "sections": json.dumps(list(key.sections)), "metrics": json.dumps(list(key.metrics)),
        "replay_mode": key.replay_mode, "key": key.canonical(), "outcome": outcome,
        "passes_reached": None if passes is None else int(passes),
        "stall_s": None if stall_s is None else float(stall_s),
        "elapsed_s": None if elapsed_s is None else float(elapsed_s),
        "command": command, "trusted": 1 if trusted else 0,
        "rung": rung, "ladder": ladder, "note": mask_text(note or ""), "run_id": run_id,
        "allowance_s": None if allowance_s is None else float(allowance_s), "basis": basis,
        "processes": int(env.processes), "gpus": env.gpus, "ranks": key.ranks,
        "uid": uid or uuid.uuid4().hex, "user": user,
    }


def attempt_rows(attempt: "Attempt", key: Any, env: Environment, *, time: str, user: Optional[str],
                 kernel: Optional[str] = None, rung: Optional[str] = None,
                 ladder: Optional[str] = None) -> list[dict[str, Any]]:
    """The rows of one watched run (see HangStore.record_attempt); none for a program fault or an interrupt."""
    if attempt.program_fault or attempt.status == INTERRUPTED:
        return []
    common = dict(command=attempt.command, trusted=not attempt.gpu_foreign_before, rung=rung, ladder=ladder,
                  time=attempt.started_at or time, elapsed_s=attempt.elapsed_s, user=user,
                  run_id=attempt.cookie or uuid.uuid4().hex)
    stall = attempt.stall
    rows = _finished_rows(attempt, key, env, common)
    if attempt.status == HANG and stall is not None:
        rows.append(_hang_row(attempt, key, env, common, kernel))
    if not rows:
        extra = "; ".join(attempt.notes)
        name = attempt.stalled_kernel or kernel or "*"
        status = attempt.status if attempt.status in OUTCOMES else ERROR
        note = attempt.reason + (f"; {extra}" if extra else "")
        rows.append(record_row(name, key, status, env, passes=None, stall_s=stall.silent_s if stall else None,
                               note=note, allowance_s=stall.allowance_s if stall else None,
                               basis=stall.basis if stall else None, **common))
    return rows


def _finished_rows(attempt: "Attempt", key: Any, env: Environment, common: dict) -> list[dict[str, Any]]:
    """``ok`` rows for the kernels the attempt finished (Attempt.finished_kernels), one per name."""
    stall = attempt.stall
    if attempt.status not in (OK, HANG) or (attempt.status == HANG and stall is None):
        return []
    best: dict[str, list[int]] = {}
    for k in attempt.finished_kernels:
        passes, launches = best.get(k.name, (0, 0))
        best[k.name] = [max(passes, k.passes), launches + 1]
    rows = []
    for name, (passes, launches) in best.items():
        bits = [f"{launches} launches profiled"] if launches > 1 else []
        if stall is not None:
            bits.append(f"finished before {stall.kernel} hung")
        rows.append(record_row(name, key, OK, env, passes=passes, stall_s=None, note="; ".join(bits), **common))
    return rows


def _hang_row(attempt: "Attempt", key: Any, env: Environment, common: dict,
              kernel: Optional[str]) -> dict[str, Any]:
    stall = attempt.stall
    extra = "; ".join(attempt.notes)
    reached = [k.passes for k in attempt.kernels
               if k.replay != ReplayMode.KERNEL and (k.name, k.kernel_id) == (stall.kernel, stall.kernel_id)]
    note = f"stalled at {stall.where!r}" + (f" in application replay pass {max(reached)}" if reached else "")
    note += f": {attempt.reason}" + (f"; {extra}" if extra else "")
    subject = stall.kernel
    if kernel is not None and as_key(key).replay_mode in RANGE_MODES:
        subject = kernel
        note = f"the range holding it stalled ({stall.kernel!r}); " + note
    # Last, so that it is the newest row of this kernel (see hangs_for).
    return record_row(subject, key, HANG, env, passes=None, stall_s=stall.silent_s, note=note,
                      allowance_s=stall.allowance_s, basis=stall.basis, **common)

"""nsightwrap.triage(fn_or_command, ...): triage a program, or a Python callable in a child process.

A callable travels as profile(fn)'s does (call.spec: by module and name, its
arguments pickled) and runs in `python -m nsightwrap.call` with no warm-up
and one call, without ncu and without a profiler range (CallSpec.ranged: nothing profiles it, and a range before
fn's first CUDA call would start CUDA on device 0 itself); a failing call prints its traceback there
(NSIGHTWRAP_CALL_TRACEBACK), so that its CUDA error is read like a program's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional, Sequence, Union

from nsightwrap.call.child import TRACEBACK_VAR
from nsightwrap.call.spec import CallFiles, make_spec
from nsightwrap.diagnose.result import TriageResult
from nsightwrap.diagnose.run import TriageOptions, triage_command
from nsightwrap.ncu.context import RunConfig
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.opening import open_store

__all__ = ["after_profile", "triage", "triage_callable", "with_store_notes"]


def triage_callable(fn: Callable[..., Any], args: tuple, kwargs: dict, options: TriageOptions, config: RunConfig,
                    store: Optional[HangStore], **more: Any) -> TriageResult:
    """triage_command on fn(*args, **kwargs), run in a child process (its private folder removed after)."""
    files = CallFiles.create()
    try:
        files.write_spec(make_spec(fn, args, kwargs, 0, 1, ranged=False))  # run without a profiler: no range
        env = dict(os.environ if config.env is None else config.env, **{TRACEBACK_VAR: "1"})
        return triage_command(files.command(files.plain_result), options, config.replace(env=env), store=store,
                              **more)
    finally:
        files.remove()


def triage(fn_or_command: Union[Callable[..., Any], Sequence[str]], *args: Any, runs: int = 5,
           tools: Optional[Sequence[str]] = None, kernel: Optional[str] = None, walk: bool = False,
           set: str = "full", ladder: str = "default", blocking: bool = True,  # noqa: A002 - ncu's word
           timeout: Optional[float] = None, sanitizer: Optional[str] = None,
           store: "HangStore | str | os.PathLike[str] | None | bool" = None, config: Optional[RunConfig] = None,
           on_output: Optional[Callable[[str], None]] = None, say: Optional[Callable[[str], None]] = None,
           **kwargs: Any) -> TriageResult:
    """Is it ncu or my kernel? Runs without ncu (`runs` of them), compute-sanitizer's `tools` (default all
    four), optionally the ncu walk, and a verdict (result.verdict, .status, .exit_code, .to_dict()).

    fn_or_command: a command (list of strings) or a callable, called as fn(*args, **kwargs) in a child
    process. store: a HangStore, a path or a database URL, None (the default store) or False (record nothing);
    a team's database that cannot be reached gives the local default file instead (its note in result.notes).
    """
    options = TriageOptions(runs=runs, tools=tuple(tools) if tools is not None else TriageOptions.tools,
                            kernel=kernel, walk=walk, set=set, ladder=ladder, blocking=blocking, timeout=timeout,
                            sanitizer=sanitizer)
    config = config or RunConfig()
    more = {"on_output": on_output} | ({"say": say} if say else {})
    own = store is None or isinstance(store, (str, os.PathLike))
    opened = open_store(store) if own else (store or None)
    try:
        if callable(fn_or_command):
            result = triage_callable(fn_or_command, args, kwargs, options, config, opened, **more)
        elif args or kwargs:
            raise TypeError("arguments after a command are for a callable: put them in the command's list")
        else:
            result = triage_command(list(fn_or_command), options, config, store=opened, **more)
        return with_store_notes(result, opened if own else None)
    finally:
        if own and opened is not None:
            opened.close()


def with_store_notes(result: TriageResult, store: Optional[HangStore]) -> TriageResult:
    """`result` with the notes of the store it opened first (the team's database was down: recorded locally)."""
    if store is None or not store.notes:
        return result
    return dataclasses.replace(result, notes=(*store.notes, *result.notes))


def after_profile(result: Any, fn: Callable[..., Any], args: tuple, kwargs: dict,
                  triage: "bool | str | TriageOptions | None", config: Optional[RunConfig],
                  store: Optional[HangStore]) -> Any:
    """profile(fn, triage=...): True or TriageOptions triage fn when its profile hung or failed (its walk is
    the ncu side, so no second walk), "always" after every profile; the TriageResult goes to result.triage."""
    if not triage:
        return result
    if triage not in (True, "always") and not isinstance(triage, TriageOptions):
        raise TypeError(f"triage={triage!r}: give True (after a hang or failure), 'always', or a TriageOptions")
    failed = bool(result.hung) or getattr(result.walk, "status", "ok") != "ok"
    if triage == "always" or failed:
        options = triage if isinstance(triage, TriageOptions) else TriageOptions()
        result.triage = triage_callable(fn, args, kwargs, options, config or RunConfig(), store)
    return result

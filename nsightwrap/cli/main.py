"""`python -m nsightwrap ...`: the command line; each command lives in its own module.

Exit codes of `run`: 0 ok, 3 hang, 4 timeout, 5 error (ncu refused or
failed), 6 no kernels profiled, 7 crashed (the program failed), 130
interrupted, 2 usage or set-up problem found before launching.

`main` owns the stop signals before it loads anything heavy, so a signal at
any moment is `interrupted` (130, and with --json one JSON object); once the
answer is printed, signals change neither it nor the exit code. stderr goes
through a writer of its own (watch.writer): output nobody reads never
blocks a run; a reader of stdout that went away (`| head`, `| true`) costs
its output, never a traceback nor the rest of the command (`cleanup | true`
still stops what it said it stops): the exit code is the command's, or 141
(128 + SIGPIPE) when the command succeeded but its output was cut before
its end.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Optional, Sequence

from nsightwrap.status import EXIT_CODES, INTERRUPTED
from nsightwrap.watch.signals import Interrupts, ignore_stop_signals, settle
from nsightwrap.watch.writer import BROKEN_PIPE_EXIT, OutputWriter, ReaderSafe, TextOut, lost_output, silence

#: At the end, how long what is left of stderr may take to be written (seconds); the rest is dropped.
CLOSE_S = 1.0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit code of the command; with --json, stdout holds exactly one JSON object whatever happens."""
    from_shell = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    scope = Interrupts(raise_first=True).__enter__()  # first thing: a signal from now on is `interrupted`
    loading = CollectorPause()
    try:
        if from_shell:  # a library caller's collector is never touched
            loading.pause()
        code = _answer(argv, loading.resume)
    finally:
        settle()  # the answer is given: later signals are only counted
        loading.resume()
        if from_shell:
            ignore_stop_signals()  # exiting: a late Ctrl-C or SIGTERM must not turn into a traceback or -15
        else:
            scope.__exit__(None, None, None)
    if from_shell and (scope.received or (scope.outer is not None and scope.outer.received)):
        exit_now(code)
    if from_shell:
        quick_exit()
    return code


class CollectorPause:
    """The cyclic garbage collector paused while the command line loads its modules, until `resume()`.

    Importing makes many long-lived objects and almost no garbage, and the collector walked them again and
    again as they piled up (issue 20; benchmarks/cli_start.py, CPU paused / collecting: `--version`, which loads
    every command, 0.83-0.86 on the 2-core machine's Python 3.11 and 0.94 on the GPU machine's 3.12; a plain `run`
    of the fake ncu 0.97-1.04, its collections mostly after its module is loaded). Resumed once the command's module
    is loaded, what the imports made frozen first (never walked again), so a long walk's collections stay short;
    what the command loads later (pandas, SQLAlchemy) loads with the collector on."""

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        if gc.isenabled():
            gc.disable()
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            try:
                gc.freeze()
            finally:  # on again whatever interrupts the freeze
                gc.enable()
                self.paused = False


def quick_exit() -> None:
    """The process is about to exit: its garbage collected once, now, and every object left frozen, so the
    interpreter's own exit does not walk them all again (pandas, SQLAlchemy and ncu_report loaded: 0.15-0.3 s
    of a walk's time after its answer, issue 19). Finalizers still run: cyclic garbage is collected here (the
    hang store's SQLite connection closes, its WAL checkpointed away), exit handlers and threads as always."""
    gc.collect()
    gc.freeze()


def _answer(argv: list[str], loaded: Callable[[], None]) -> int:
    try:
        with _own_streams():
            return _command(argv, loaded)
    except KeyboardInterrupt:  # while the commands load, or outside one's own handling
        return answer_interrupted(argv)
    except RuntimeError as e:  # Python 3.11 wraps one raised while a class is made (`__set_name__` of a field)
        if isinstance(e.__cause__, KeyboardInterrupt):
            return answer_interrupted(argv)
        raise


def exit_now(code: int) -> NoReturn:
    """Exit with `code` after a signal: exit handlers run, streams flushed, then os._exit.

    A KeyboardInterrupt raised while Python imports can leave the interpreter's flag of an unhandled
    KeyboardInterrupt set (CPython sets it when one leaves code it runs through PyRun_*), and Python
    then ends the process by SIGINT (-2) whatever exit code it was given: seen here in about one run
    of three with a Ctrl-C 0.3 s after the start.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            silence(stream)
        except (OSError, ValueError):
            pass
    os._exit(code)


def answer_interrupted(argv: Sequence[str], reason: str = "interrupted") -> int:
    """The answer to a signal that came before a command could answer it (light: nothing to import)."""
    settle()
    own = list(argv)[: list(argv).index("--")] if "--" in argv else list(argv)
    code = EXIT_CODES[INTERRUPTED]
    try:
        print(f"nsightwrap: {reason}", file=sys.stderr)
        if "--json" in own:
            print(json.dumps({"status": INTERRUPTED, "exit_code": code, "reason": reason}), flush=True)
    except BrokenPipeError:
        silence(sys.stdout)
    return code


def _command(argv: list[str], loaded: Callable[[], None]) -> int:
    from nsightwrap.cli.commands import run_command  # heavy: after the signals are ours

    out = ReaderSafe(sys.stdout)  # a reader of stdout that goes away costs its output, never the command
    sys.stdout = out  # type: ignore[assignment]
    try:
        code = run_command(argv, loaded)
        settle()  # the command answered: a signal while stderr drains changes neither answer nor code
        out.finish()
    except BrokenPipeError:  # a write that went round the wrapper (to the descriptor itself): no traceback
        silence(out.stream)
        return BROKEN_PIPE_EXIT
    finally:
        sys.stdout = out.stream
    if out.cut and code == 0:  # output lost in the middle and nothing else went wrong: as SIGPIPE would
        return BROKEN_PIPE_EXIT
    return code


@contextmanager
def _own_streams() -> Iterator[None]:
    """stderr through a writer of its own for the command; afterwards what is left gets CLOSE_S seconds."""
    err = sys.stderr
    try:
        fd = err.fileno()
        err.flush()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): it never blocks
        yield
        return
    writer = OutputWriter(fd)
    sys.stderr = TextOut(writer)  # type: ignore[assignment]
    try:
        yield
    finally:
        try:
            writer.flush(CLOSE_S)
            lost = writer.dropped + writer.pending
            if lost:
                sys.stderr.write(f"nsightwrap: {lost_output(lost)}\n")
        finally:
            sys.stderr = err
            writer.close(CLOSE_S if not (writer.dropped or writer.pending) else 0.1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""`python -m nsightwrap hangs ...`: read and edit the hang store.

``list``, ``show`` and ``export`` open the store read-only, so a store this
user cannot write (a colleague's, a read-only mount, a database role that may
only SELECT) can still be read; ``forget`` and ``import`` need write access.
``list`` counts, and ``show`` marks, the records made with another GPU model,
driver or ncu version than this machine's: stale here, never applied.
``export FILE`` / ``import FILE`` move records between stores (JSON lines,
CSV or YAML; importing twice adds nothing: each record keeps its uid). ``bundle`` writes one archive about a kernel
(cli.bundle). ``list`` and ``show`` take ``--json``: then
stdout holds exactly one JSON object, errors included (``"status":
"error"``), written as every command's (cli.common.print_json: secrets
masked, output lost on stderr said, later signals settled). Output cut
short by its reader (``hangs show K | head``) ends quietly with exit code
141, as for a program stopped by SIGPIPE; the JSON object counts as said,
as for the other commands.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import IO, Any, Callable, Optional, Sequence

from nsightwrap.cli.common import print_json
from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.paths import ENV_XDG_CACHE
from nsightwrap.status import ERROR, OK, USAGE_EXIT_CODE
from nsightwrap.store.debuglog import debug_log
from nsightwrap.store.export import FORMATS, format_of, read_records
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.store.location import StoreLocation, resolve_store
from nsightwrap.store.paths import DEFAULT_STORE, ENV_STORE
from nsightwrap.watch.writer import BROKEN_PIPE_EXIT, silence

__all__ = ["add_hangs_parser", "cmd_hangs"]


def add_hangs_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``hangs`` with sub-commands list, show, export, forget to an
    ``add_subparsers()`` object; returns the ``hangs`` parser. Run the
    result with :func:`cmd_hangs`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="PATH|URL",
                        help=f"hang store: a file, or a team's postgresql://user@host/db (default: ${ENV_STORE}, "
                             f"else ${ENV_XDG_CACHE}/nsightwrap/hangs.db, else {DEFAULT_STORE})")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    hangs = subparsers.add_parser("hangs", help="what is known about kernels that hung under ncu",
                                  description="Inspect and edit the hang store: which profiling settings "
                                              "hung on which kernels.")
    sub = hangs.add_subparsers(dest="hangs_cmd", metavar="SUBCOMMAND")
    sub.add_parser("list", parents=[common, as_json], help="one line per kernel: records, hangs, last seen")
    show = sub.add_parser("show", parents=[common, as_json], help="the records of one kernel (and kernels like it)")
    show.add_argument("kernel", metavar="KERNEL")
    show.add_argument("--markdown", action="store_true", help="print the Markdown debug log of the kernel")
    export = sub.add_parser("export", parents=[common], help="write the records as CSV, YAML or JSON lines")
    export.add_argument("file", nargs="?", metavar="FILE", help="file to write (default: stdout)")
    export.add_argument("--format", choices=FORMATS, help="default: the FILE's suffix (.csv, .yaml, .jsonl), "
                                                          "else csv")
    export.add_argument("-o", "--output", metavar="FILE", help="file to write (as FILE)")
    export.add_argument("--kernel", metavar="K", help="only this kernel (exact name)")
    imp = sub.add_parser("import", parents=[common], help="add the records of an export (kept once, however "
                                                          "often imported)")
    imp.add_argument("file", metavar="FILE", help="a file written by `hangs export`")
    imp.add_argument("--format", choices=FORMATS, help="default: the FILE's suffix, else JSON lines")
    forget = sub.add_parser("forget", parents=[common], help="delete records")
    which = forget.add_mutually_exclusive_group(required=True)
    which.add_argument("--kernel", metavar="K", help="every record of kernel K (exact name)")
    which.add_argument("--id", type=int, metavar="N", help="record number N (see `hangs show`)")
    which.add_argument("--all", action="store_true", help="every record")
    bundle = sub.add_parser("bundle", parents=[common, as_json],
                            help="one archive about a kernel to hand on (a teammate, NVIDIA's bug tracker)",
                            description="Write the records, exact commands, run logs, stall evidence, debug log, "
                                        "calibrations, sweep results and versions of KERNEL into one archive, "
                                        "secrets masked; its README.md says what each file is.")
    bundle.add_argument("kernel", metavar="KERNEL")
    bundle.add_argument("-o", "--output", metavar="FILE", required=True, help="the archive: .tar.gz, .tgz or .zip")
    bundle.add_argument("--runs", metavar="DIR", help="where runs kept their evidence (default: $NSIGHTWRAP_EVIDENCE, "
                                                      "else the cache's runs/)")
    hangs.set_defaults(hangs_cmd=None, _hangs_parser=hangs)
    return hangs


def cmd_hangs(args, out: Optional[IO[str]] = None, err: Optional[IO[str]] = None) -> int:
    """Run ``hangs SUBCOMMAND``: 0 on success, 2 with a message on an expected error."""
    out = out or sys.stdout
    err = err or sys.stderr
    cmd = getattr(args, "hangs_cmd", None)
    if cmd is None:
        parser = getattr(args, "_hangs_parser", None)
        (parser.print_help(err) if parser else print("nsightwrap hangs: give a sub-command: list, show, "
                                                     "export, import or forget", file=err))
        return USAGE_EXIT_CODE
    try:
        path = resolve_store(getattr(args, "store", None))
    except NsightwrapError as e:
        return _failed(e, args, getattr(args, "store", None), out, err)
    try:
        try:
            code = _COMMANDS[cmd](args, path, out, err)
        except (NsightwrapError, ValueError) as e:
            code = _failed(e, args, path, out, err)
        out.flush()
        return code
    except BrokenPipeError:
        silence(out)
        return BROKEN_PIPE_EXIT


def _failed(e: Exception, args, path: Any, out: IO[str], err: IO[str]) -> int:
    print(f"nsightwrap hangs: {e}", file=err)
    if getattr(args, "json", False):
        print_json({"status": ERROR, "error": str(e), "store": str(path)}, out)
    return USAGE_EXIT_CODE


def _exists(where: StoreLocation) -> bool:
    """Is there a store to read (a database always is: opening it says otherwise)?"""
    return where.is_database or os.path.lexists(where.path)


def _present(where: StoreLocation) -> bool:
    return where.is_database or where.path.exists()


def _here() -> Environment:
    """This machine, as far as it can be told without a GPU run: nvidia-smi's GPU and driver, ncu's version
    (None where missing: not compared)."""
    try:
        version: Optional[str] = RunContext.create(RunConfig()).info.version
    except (NsightwrapError, OSError):
        version = None
    return Environment.detect(ncu_version=version)


def _stale_why(record, here: Environment) -> Optional[str]:
    """Why a record is stale here (another GPU, driver or ncu), or None."""
    diffs = [f"{what} {theirs}" for what, theirs, mine in (("GPU", record.gpu, here.gpu),
                                                          ("driver", record.driver, here.driver),
                                                          ("ncu", record.ncu_version, here.ncu_version))
             if mine is not None and theirs != mine]
    return ", ".join(diffs) or None


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def _fmt_s(value: Optional[float]) -> Optional[str]:
    return None if value is None else f"{value:.1f}"


def _list(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    rows, uncalibrated, stale = [], {}, {}
    if _exists(path):
        with HangStore(path, readonly=True) as store:
            rows = store.kernels()
            uncalibrated = store.uncalibrated_hangs()
            stale = store.stale_records(_here()) if rows else {}
    if args.json:
        print_json({"status": OK, "store": str(path), "exists": _present(path),
                    "kernels": [dict(k._asdict(), n_uncalibrated=uncalibrated.get(k.kernel, 0),
                                     n_stale=stale.get(k.kernel, 0)) for k in rows]}, out)
    elif not _present(path):
        print(f"no hang store at {path} yet: nothing recorded", file=out)
    elif not rows:
        print(f"no records in {path}", file=out)
    else:
        # Hangs judged without the kernel's calibrated allowance may be slow kernels: say how many; and, when
        # there are any, the records of another GPU, driver or ncu version (stale: shown, never applied here).
        header = ["KERNEL", "RECORDS", "HANGS", "UNCALIBRATED", *(["STALE"] if stale else []), "LAST"]
        print(_table(header, [(k.kernel, k.n_records, k.n_hangs, uncalibrated.get(k.kernel, 0),
                               *([stale.get(k.kernel, 0)] if stale else []), k.last_time) for k in rows]), file=out)
    return 0


def _show(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    recs, markdown = [], None
    if _exists(path):
        with HangStore(path, readonly=True) as store:
            recs = store.records(kernel=args.kernel) or store.records(pattern=args.kernel)
            markdown = debug_log(store, args.kernel) if args.markdown else None
    if args.json:
        here = _here() if recs else Environment()
        doc = {"status": OK, "store": str(path), "exists": _present(path), "kernel": args.kernel,
               "pattern": normalize_kernel(args.kernel),
               "records": [dict(r.to_dict(), stale=_stale_why(r, here)) for r in recs]}
        if args.markdown:
            doc["markdown"] = markdown
        print_json(doc, out)
    elif not _present(path):
        print(f"no hang store at {path} yet: nothing recorded", file=out)
    elif markdown is not None:
        print(markdown, file=out)
    elif not recs:
        print(f"no records of {args.kernel} (nor of kernels like it, {normalize_kernel(args.kernel)})", file=out)
    else:
        _print_records(recs, out, _here())
    return 0


def _print_records(recs, out: IO[str], here: Environment) -> None:
    stale = {r.id: _stale_why(r, here) for r in recs}
    rows = [(r.id, r.time, r.kernel, r.outcome + ("" if r.trusted else " (untrusted)")
             + (" (not calibrated)" if r.hung and not r.calibrated else "")
             + (" (stale)" if stale[r.id] else ""), r.profile_key.describe(),
             r.processes, r.passes_reached, _fmt_s(r.stall_s), _fmt_s(r.elapsed_s), r.gpu, r.driver, r.ncu_version)
            for r in recs]
    print(_table(["ID", "TIME", "KERNEL", "OUTCOME", "SETTINGS", "PROCESSES", "PASSES", "STALL_S", "ELAPSED_S",
                  "GPU", "DRIVER", "NCU"], rows), file=out)
    for r in recs:
        if r.command or r.note or stale[r.id]:
            print(f"\n#{r.id}: {shlex.join(r.command) if r.command else '(no command)'}"
                  + (f"\n    {r.note}" if r.note else "")
                  + (f"\n    allowance {r.allowance_s:.1f} s {r.basis}" if r.basis and r.allowance_s is not None
                     else "")
                  + (f"\n    stale here: recorded with {stale[r.id]}; never applied on this machine"
                     if stale[r.id] else "")
                  + (f"\n    recorded on {r.host or 'an unknown host'} by {r.user}" if r.user else ""), file=out)


def _export(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    if not _exists(path):
        print(f"nsightwrap hangs: no hang store at {path} yet: nothing to export", file=err)
        return USAGE_EXIT_CODE
    target = args.output or args.file
    fmt = args.format or format_of(target)
    with HangStore(path, readonly=True) as store:
        write = {"csv": store.export_csv, "yaml": store.export_yaml, "jsonl": store.export_jsonl}[fmt]
        n = write(target or out, kernel=args.kernel)
    if target:
        print(f"wrote {n} record(s) to {target}", file=err)
    return 0


def _import(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    recs = read_records(args.file, args.format)
    with HangStore(path) as store:
        added = store.import_records(recs)
    print(f"imported {added} of {len(recs)} record(s) from {args.file} into {path}"
          + (f" ({len(recs) - added} already there)" if added < len(recs) else ""), file=out)
    return 0


def _forget(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    with HangStore(path) as store:
        n = store.forget(kernel=args.kernel, record_id=args.id, all=args.all)
    print(f"deleted {n} record(s) from {path}", file=out)
    return 0


def _bundle(args, path: StoreLocation, out: IO[str], err: IO[str]) -> int:
    # Lazy on purpose: the bundle asks the tools their versions (cli.versions: the preflight, the calibrator,
    # the sanitizer), ~0.1 s of imports that list, show, export, import and forget never need.
    from nsightwrap.cli.bundle import hang_bundle

    made = hang_bundle(args.kernel, args.output, store=path, runs_folder=args.runs)
    if args.json:
        print_json(dict(made.to_dict(), store=str(path)), out)
    if made.error:
        print(f"nsightwrap hangs bundle: {made.error}", file=err)
    else:
        print(f"wrote {made.path}: {made.records} record(s), {len(made.runs)} run folder(s), {len(made.files)} "
              "file(s); read its README.md before sending it", file=err)
    return made.exit_code


_COMMANDS: dict[str, Callable[..., int]] = {"list": _list, "show": _show, "export": _export, "import": _import,
                                            "forget": _forget, "bundle": _bundle}

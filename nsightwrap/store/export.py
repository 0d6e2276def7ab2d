"""Records out of the store and back: CSV for spreadsheets, YAML for people and scripts, JSON lines
(one record a line) for moving records between stores (``hangs export FILE`` / ``hangs import FILE``).

All keep every column of :class:`~nsightwrap.store.schema.Record`, in the
order of :data:`~nsightwrap.store.schema.COLUMNS`, so an export reads back
into the same records (:func:`read_records`, whichever of the three it is).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Optional, Union

from nsightwrap.errors import StoreError
from nsightwrap.store.schema import COLUMNS, SCHEMA_VERSION, Record

__all__ = ["FORMATS", "csv_cell", "format_of", "read_records", "write_csv", "write_jsonl", "write_yaml"]

#: Export formats, by the name --format takes.
FORMATS = ("csv", "yaml", "jsonl")
_SUFFIXES = {".csv": "csv", ".yaml": "yaml", ".yml": "yaml", ".jsonl": "jsonl", ".json": "jsonl"}
_INTS = {"id", "passes_reached", "processes", "gpus"}
_FLOATS = {"stall_s", "elapsed_s", "allowance_s"}

Target = Union[str, "os.PathLike[str]", IO[str]]


def csv_cell(value: Any) -> Any:
    """Lists as JSON text, None as empty, booleans as ``true``/``false``."""
    if value is None:
        return ""
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def write_csv(records: Iterable[Record], target: Target, store_path: Path) -> int:
    """Write the records as CSV with a header of COLUMNS; the rows written."""
    recs = list(records)

    def write(f: IO[str]) -> None:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in recs:
            d = r.to_dict()
            w.writerow([csv_cell(d[c]) for c in COLUMNS])

    _write_out(target, write, store_path)
    return len(recs)


def write_yaml(records: Iterable[Record], target: Target, store_path: Path) -> int:
    """Write ``{schema_version, records: [...]}`` with yaml.safe_dump; the rows written."""
    import yaml  # here, not at the top: every process that opens a store (a probe's job) would pay its import

    recs = list(records)
    doc = {"schema_version": SCHEMA_VERSION, "records": [r.to_dict() for r in recs]}
    _write_out(target, lambda f: yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True), store_path)
    return len(recs)


def write_jsonl(records: Iterable[Record], target: Target, store_path: Path) -> int:
    """Write one JSON object a line (Record.to_dict()); the rows written."""
    recs = list(records)
    _write_out(target, lambda f: f.writelines(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in recs),
               store_path)
    return len(recs)


def format_of(path: Union[str, "os.PathLike[str]", None], default: str = "csv") -> str:
    """The format a file's name says (.csv, .yaml/.yml, .jsonl/.json), else `default`."""
    return _SUFFIXES.get(Path(path).suffix.lower(), default) if path else default


def _record(d: dict[str, Any], where: str) -> Record:
    """A Record from an exported row (lists as lists or JSON text, CSV's empty cells and true/false)."""
    try:
        values = {}
        for c in COLUMNS:
            v = d.get(c)
            if isinstance(v, str) and c not in ("sections", "metrics", "command", "trusted"):
                v = None if v == "" and c not in ("note", "kernel") else (int(v) if c in _INTS and v else
                                                                           float(v) if c in _FLOATS and v else v)
            values[c] = v
        for c in ("sections", "metrics", "command"):
            v = values[c]
            values[c] = tuple(json.loads(v) if isinstance(v, str) else v or ())
        values["trusted"] = values["trusted"] in (True, 1, "true", "1", "True")
        values["note"] = values["note"] or ""
        values["id"] = values["id"] or 0
        return Record(**{k: v for k, v in values.items() if v is not None or k in _NULLABLE})
    except (TypeError, ValueError) as e:
        raise StoreError(None, f"{where} is not a record of a hang store export ({e}): give a file written by "
                         "`nsightwrap hangs export` (CSV, YAML or JSON lines).") from None


_NULLABLE = {"host", "gpu", "driver", "ncu_version", "set", "passes_reached", "stall_s", "elapsed_s", "rung",
             "ladder", "run_id", "allowance_s", "basis", "gpus", "uid", "user"}


def read_records(path: Union[str, "os.PathLike[str]"], fmt: Optional[str] = None) -> list[Record]:
    """The records of an export (its format from `fmt`, else from the file's name, else JSON lines)."""
    import yaml  # as write_yaml

    fmt = fmt or format_of(path, "jsonl")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            if fmt == "csv":
                rows = list(csv.DictReader(f))
            elif fmt == "yaml":
                doc = yaml.safe_load(f) or {}
                rows = doc.get("records", []) if isinstance(doc, dict) else None
            else:
                rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise StoreError(None, f"cannot read the records in {path}: {getattr(e, 'strerror', None) or e}. Give a "
                         "file written by `nsightwrap hangs export`.") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise StoreError(None, f"{path} holds no list of records: give a file written by `nsightwrap hangs export`.")
    return [_record(r, f"{path}, record {i + 1},") for i, r in enumerate(rows)]


def _write_out(target: Target, write: Callable[[IO[str]], Any], store_path: Path) -> None:
    if isinstance(target, (str, os.PathLike)):
        try:
            with open(target, "w", newline="", encoding="utf-8") as f:
                write(f)
        except OSError as e:
            raise StoreError(store_path, f"cannot write the export to {target}: {e.strerror or e}. "
                             "Choose another file (-o FILE).") from None
    else:
        write(target)

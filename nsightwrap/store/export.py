"""Records out of the store: CSV for spreadsheets, YAML for people and scripts.

Both keep every column of :class:`~nsightwrap.store.schema.Record`, in the
order of :data:`~nsightwrap.store.schema.COLUMNS`, so an export reads back
into the same records.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Union

import yaml

from nsightwrap.errors import StoreError
from nsightwrap.store.schema import COLUMNS, SCHEMA_VERSION, Record

__all__ = ["csv_cell", "write_csv", "write_yaml"]

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
    recs = list(records)
    doc = {"schema_version": SCHEMA_VERSION, "records": [r.to_dict() for r in recs]}
    _write_out(target, lambda f: yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True), store_path)
    return len(recs)


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

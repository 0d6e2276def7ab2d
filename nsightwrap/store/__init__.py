"""The hang store: which profiling settings hung on which kernels, on which GPU.

Layers inside, each importing only those before it: ``keys`` (ProfileKey,
Environment; kernel-name patterns are nsightwrap.ncu.names.normalize_kernel), ``paths`` (where the
store lives, private files), ``location`` (a file or a PostgreSQL URL, resolved once), ``schema``
(Record, migrations), ``queries`` (every statement, SQLAlchemy Core), ``migrate``,
``check`` (is it a store file the commands can use: the one
check of every command and doctor), ``database`` (one connection, SQLite or PostgreSQL),
``export`` (CSV/YAML/JSON lines), ``rows``, ``hangstore``
(HangStore), ``opening`` (open_store: the team's database, or
the local file when it is down), then ``debuglog`` (the Markdown log, written from a store;
nothing in the store imports it). The ``hangs`` command is in
:mod:`nsightwrap.cli.hangs`.
"""

from nsightwrap.store.hangstore import BUSY_TIMEOUT_S, HangStore
from nsightwrap.store.keys import Environment, ProfileKey
from nsightwrap.store.location import StoreLocation, resolve_store
from nsightwrap.store.opening import open_store
from nsightwrap.store.paths import DEFAULT_STORE, ENV_STORE, default_store_path, store_path
from nsightwrap.store.schema import COLUMNS, MIGRATIONS, SCHEMA_VERSION, CalibrationRow, KernelSummary, Record

__all__ = [
    "BUSY_TIMEOUT_S",
    "COLUMNS",
    "CalibrationRow",
    "DEFAULT_STORE",
    "ENV_STORE",
    "Environment",
    "HangStore",
    "KernelSummary",
    "MIGRATIONS",
    "ProfileKey",
    "Record",
    "SCHEMA_VERSION",
    "StoreLocation",
    "default_store_path",
    "open_store",
    "resolve_store",
    "store_path",
]

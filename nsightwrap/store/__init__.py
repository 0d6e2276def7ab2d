"""The hang store: which profiling settings hung on which kernels, on which GPU.

Layers inside, each importing only those before it: ``keys`` (ProfileKey,
Environment; kernel-name patterns are nsightwrap.ncu.names.normalize_kernel), ``paths`` (where the store lives, private
files), ``schema`` (Record, migrations), ``check`` (is it a store the commands can use: the one
check of every command and doctor), ``export`` (CSV/YAML), ``hangstore``
(HangStore), then ``debuglog`` (the Markdown log, written from a store;
nothing in the store imports it). The ``hangs`` command is in
:mod:`nsightwrap.cli.hangs`.
"""

from nsightwrap.store.hangstore import BUSY_TIMEOUT_S, HangStore
from nsightwrap.store.keys import Environment, ProfileKey
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
    "default_store_path",
    "store_path",
]

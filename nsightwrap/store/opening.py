"""Open the store a run records in: the team's database, or this machine's file when the database is down.

A run must not fail because a shared database cannot be reached: :func:`open_store` then opens the default
local SQLite file instead, and says so once, in one line (``store.notes``: the caller prints it on stderr
and adds it to its result's notes). The records made there can be moved to the team's store later
(``hangs export`` / ``hangs import``: each record's uid makes that idempotent).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import StoreArg, StoreUnreachable, local_default, resolve_store

__all__ = ["open_store"]


def open_store(setting: StoreArg = None, *, env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> HangStore:
    """HangStore(setting) (precedence: see nsightwrap.store.location.resolve_store); a database that cannot be
    reached gives the local default file instead, with a note in ``store.notes``. Other errors raise."""
    location = resolve_store(setting, env)
    try:
        return HangStore(location, **kwargs)
    except StoreUnreachable as e:
        if not location.is_database or kwargs.get("readonly"):
            raise
        local = local_default(os.environ if env is None else env)
        store = HangStore(local, **kwargs)
        store.notes.append(f"{e} Recording in the local hang store {local} instead: move its records later with "
                           f"`nsightwrap hangs export FILE --store {local}` and `nsightwrap hangs import FILE`.")
        return store
